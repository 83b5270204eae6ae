"""What a stack is: the layouts, precision, recompute and time defaults of one framework."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.errors import InputError

# The switches a stack may offer (``Stack.options``), each a request field and a CLI flag
# of the same name (``--async-tp``).
SWITCHES: tuple[str, ...] = ('compile', 'async_tp', 'overlap_grad_reduce',
                             'partition_activations', 'zero_bubble', 'tp_comm_overlap',
                             'grad_reduce_in_bf16')


def switch_label(name: str) -> str:
    """A switch in the words headers and summaries use (``async TP``)."""
    return {'async_tp': 'async TP', 'tp_comm_overlap': 'TP comm overlap'}.get(
        name, name.replace('_', ' '))


@dataclass(frozen=True)
class StackMode:
    """One documented way a stack shards data parallelism, with its precision recipe.

    Attributes:
        name: short name (``ddp``, ``fsdp``, ``zero``...).
        zero_stages: the ZeRO stages this mode runs (FSDP2 reshard-after-forward is
            ZeRO-3, reshard never ZeRO-2).
        precision: the ``planner.memory.recipes.RECIPES`` key this mode trains with.
        description: in words.
        hybrid_shard: HSDP: this mode's FSDP (its ZeRO 2-3) also runs within a shard
            group, replicated across groups (``--dp-replicate``).
    """

    name: str
    zero_stages: tuple[int, ...]
    precision: str
    description: str
    hybrid_shard: bool = False


@dataclass(frozen=True)
class Stack:
    """A training stack as data (facts with their framework source in ``catalog``).

    Attributes:
        key: the ``--framework`` value.
        label: the name people use.
        description: one line.
        modes: the data-parallel modes, each with its ZeRO stages and recipe.
        lora_modes: the modes under LoRA/QLoRA (empty: no LoRA in this stack).
        precisions: recipes a user may pick with ``--precision`` (overriding the modes').
        recompute: recompute code name -> the stack's own words for it; only these run.
        kernels: whose saved-tensor inventory applies (``hf``: PyTorch eager modules;
            ``megatron``: fused Transformer-Engine kernels, Korthikanti et al. 2022).
        loss: ``hf`` (logits upcast to fp32, log-softmax saved) or ``megatron``
            (vocab-parallel fp32 cross-entropy).
        losses: the ``--loss`` values this stack runs (``planner.memory.training.LOSSES``
            words; '' , its own ``loss``, always): each a loss a launcher of this stack
            switches on, so a plan made with it exports as planned.
        loss_model_types: a loss that runs only on some Hugging Face model types -> those
            ``model_type`` values (Liger's fused linear cross-entropy is a patch of each
            family's ``forward``; on another family it is silently not applied).
        tensor_parallel, pipeline_parallel, virtual_stages, context_parallel,
            expert_parallel, sequence_parallel: the layout axes the stack runs.
        expert_tensor_parallel: experts may run whole (expert tensor parallelism 1) with
            EP folded out of tp x dp x cp, besides split over the TP ranks.
        no_hybrid_shard: why no mode runs HSDP (``StackMode.hybrid_shard``), in words
            a refusal quotes.
        zero_with_pp: ZeRO stages allowed together with a pipeline.
        zero0_with_split: whether ZeRO-0 (replicated) composes with TP/PP/CP
            (torchtitan's replicate-only DDP does not).
        persistent_grad_buffer: one contiguous gradient buffer kept for the whole run
            (Megatron's main-grad buffer), so gradients are alive during forward too.
        ddp_buckets: DDP's gradient buckets (a gradient-sized copy) with ZeRO-0.
        zero_buckets: DeepSpeed's reduce/all-gather buckets with ZeRO 1-3.
        fsdp_unsharded_accumulation: when FSDP2 accumulates unsharded gradients across
            micro-batches: ``no_sync`` (with gradient accumulation, as the HF Trainer
            does through ``accelerator.no_sync``), ``pipeline`` (under PP, torch's
            pipelining stage) or '' (never).
        efficiency: ``megatron`` (fused kernels, the curves' reference) or ``eager``
            (PyTorch modules; ``planner.timing.efficiency.framework_factor``).
        dp_overlap: fraction of DP/ZeRO traffic hidden behind compute by default.
        allocator_fraction: the caching allocator's reserve over the tensor peak for this
            stack (None: the estimator's default), with what it was fitted on in the
            catalog.
        user_loop: the user's own training loop runs the step (HF Trainer, accelerate, a
            plain PyTorch loop), so ``--loop`` decides whether the model output is held
            through backward. torchtitan's trainer deletes the prediction before backward
            (pytorch/torchtitan torchtitan/train.py, ``del pred``); Megatron's and
            DeepSpeed's pipeline schedules keep only the loss.
        launchers: ``planner.export`` formats that run this stack's plans.
        precision_aliases: what a ``--precision`` word means in this stack when it names
            another recipe than the word itself: word -> {mode name: recipe}, only those
            modes running it (torchtitan's ``fp8`` is its torchao float8 converter over
            FSDP2: the ``fsdp-fp8`` recipe of its ``fsdp`` mode).
        options: the stack's own switches a request may turn on (``compile``,
            ``async_tp``: torchtitan's ``[compile]`` and
            ``parallelism.enable_async_tensor_parallel``; ``overlap_grad_reduce``:
            Megatron's ``--overlap-grad-reduce``; ``partition_activations``: DeepSpeed's
            activation checkpointing option; ``zero_bubble``: torchtitan's
            ``InterleavedZeroBubble`` pipeline schedule; ``tp_comm_overlap`` and
            ``grad_reduce_in_bf16``: Megatron's ``--tp-comm-overlap`` (Transformer Engine
            userbuffers) and ``--grad-reduce-in-bf16`` (a bf16 main-grad buffer));
            ``planner.timing.stack_speed`` times torchtitan's compile and async TP and
            Megatron's TP overlap, the DP overlap Megatron's grad reduce, the memory
            model and the TP traffic DeepSpeed's; ``planner.stacks.pipeline_schedule`` the
            zero-bubble schedule's bubble and in-flight micro-batches; the memory model
            and the DP traffic the bf16 main grads.
        sources: where the facts come from (repository + path).
    """

    key: str
    label: str
    description: str
    modes: tuple[StackMode, ...]
    precisions: tuple[str, ...]
    recompute: dict[str, str]
    kernels: str
    loss: str
    launchers: tuple[str, ...]
    losses: tuple[str, ...] = ()
    loss_model_types: dict[str, frozenset[str]] = field(default_factory=dict)
    lora_modes: tuple[StackMode, ...] = ()
    tensor_parallel: bool = False
    pipeline_parallel: bool = False
    virtual_stages: bool = False
    context_parallel: bool = False
    expert_parallel: bool = False
    expert_tensor_parallel: bool = False
    sequence_parallel: bool = False
    no_hybrid_shard: str = ''
    zero_with_pp: tuple[int, ...] = ()
    zero0_with_split: bool = True
    persistent_grad_buffer: bool = False
    ddp_buckets: bool = False
    zero_buckets: bool = False
    fsdp_unsharded_accumulation: str = ''
    efficiency: str = 'eager'
    dp_overlap: float = 0.8
    allocator_fraction: float | None = None
    user_loop: bool = False
    precision_aliases: dict[str, dict[str, str]] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default_factory=tuple)

    @property
    def zero_stages(self) -> tuple[int, ...]:
        """Every ZeRO stage some mode runs, ascending."""
        return tuple(sorted({z for mode in self.modes for z in mode.zero_stages}))

    @property
    def recompute_modes(self) -> tuple[str, ...]:
        """The recompute modes this stack runs (code names)."""
        return tuple(self.recompute)

    def modes_for(self, lora: bool, precision: str = '') -> tuple[StackMode, ...]:
        """The modes a request runs: LoRA's when fine-tuning, each with ``precision``
        instead of its own recipe when one is given (already checked)."""
        modes = self.lora_modes if lora else self.modes
        if not precision:
            return modes
        alias = self.precision_aliases.get(precision)
        if alias is not None:
            return tuple(replace(m, precision=alias[m.name]) for m in modes if m.name in alias)
        return tuple(replace(m, precision=precision) for m in modes)

    def hybrid_shard_stages(self, lora: bool = False) -> tuple[int, ...]:
        """The ZeRO stages (2-3) whose mode runs HSDP, ascending (empty: no HSDP)."""
        return tuple(sorted({z for m in (self.lora_modes if lora else self.modes)
                             if m.hybrid_shard for z in m.zero_stages if z >= 2}))

    @property
    def hybrid_shard(self) -> bool:
        """Whether some mode of this stack runs HSDP."""
        return bool(self.hybrid_shard_stages())

    def recipe_of(self, precision: str, zero: int | None = None) -> str:
        """The recipe a ``--precision`` word names in this stack (its alias for the mode
        that runs ZeRO ``zero``, or the first aliased mode; else the word itself)."""
        modes = self.modes_for(False, precision) if precision in self.precision_aliases else ()
        for mode in modes:
            if zero is None or zero in mode.zero_stages:
                return mode.precision
        return modes[0].precision if modes else precision

    def runs_precision(self, precision: str) -> bool:
        """Whether ``--precision precision`` is one this stack runs (a recipe or alias)."""
        return precision in self.precisions or precision in self.precision_aliases

    def recipe_for(self, zero: int, lora: bool = False) -> str:
        """The stack's own recipe at ZeRO stage ``zero`` (the first mode that runs it)."""
        for mode in self.lora_modes if lora else self.modes:
            if zero in mode.zero_stages:
                return mode.precision
        return (self.lora_modes if lora else self.modes)[0].precision

    def loss_refusal(self, loss: str, model_type: str = '') -> tuple[str, str] | None:
        """Why this stack cannot run ``--loss loss`` on a model whose Hugging Face
        ``model_type`` is ``model_type`` ('' : not known), and what it allows; None when
        it can ('' , the stack's own loss, always runs)."""
        if not loss:
            return None
        if loss not in self.losses:
            return (f'the {self.key} stack does not run the {loss} loss',
                    f"{', '.join(self.losses)}; or none (the stack's own)")
        types = self.loss_model_types.get(loss)
        if types is not None and model_type not in types:
            what = (f'the model is of type {model_type}' if model_type else
                    "the model's Hugging Face model_type is not known (a preset or "
                    'config.json of a supported type gives it)')
            others = [x for x in self.losses if x != loss]
            return (f"{loss} is Liger's fused linear cross-entropy, which patches only some "
                    f'Hugging Face model types, and {what}',
                    '; '.join([*others, "none (the stack's own)",
                               f'{loss} on a model of type {", ".join(sorted(types))}']))
        return None

    def runs_loss(self, loss: str, model_type: str = '') -> bool:
        """Whether this stack runs ``--loss loss`` on a model of ``model_type``."""
        return self.loss_refusal(loss, model_type) is None

    def check(self, *, precision: str = '', zero_stages: tuple[int, ...] = (),
              recompute_modes: tuple[str, ...] = (), lora: bool = False,
              options: tuple[str, ...] = (), loss: str = '', model_type: str = '',
              field_names: dict[str, str] | None = None) -> None:
        """Raise InputError when an override is outside what this stack runs.

        Args:
            precision: a ``--precision`` override ('' for the stack's own recipes).
            zero_stages: the ZeRO stages asked for (checked for an overlap).
            recompute_modes: the recompute modes asked for (checked for an overlap).
            lora: LoRA/QLoRA fine-tuning.
            options: the stack switches asked for (``compile``, ``async_tp``).
            loss: a ``--loss`` override ('' for the stack's own loss).
            model_type: the model's Hugging Face ``model_type`` ('' : not known), for a
                loss that runs on some model types only (:meth:`loss_refusal`).
            field_names: how the caller names the fields (default the CLI flags); a key
                ``<option>_allowed`` says what to offer instead of a refused switch (the
                stacks that have it; the catalog is not imported here).
        """
        names = {'precision': '--precision', 'zero': '--zero', 'recompute': '--recompute',
                 'lora': '--lora-rank', 'loss': '--loss', **(field_names or {})}
        refusal = self.loss_refusal(loss, model_type)
        if refusal is not None:
            raise InputError(names['loss'], *refusal)
        for option in options:
            if option not in self.options:
                flag = names.get(option, '--' + option.replace('_', '-'))
                raise InputError(flag, f'the {self.key} stack has no '
                                 f'{option.replace("_", " ")} switch',
                                 names.get(f'{option}_allowed', 'off'))
        if lora and not self.lora_modes:
            raise InputError(names['lora'], f'the {self.key} stack trains every weight (no '
                             'LoRA/PEFT in it)', 'a stack with LoRA: hf')
        if precision and not self.runs_precision(precision):
            raise InputError(names['precision'], f'the {self.key} stack does not run '
                             f'{precision}', ', '.join((*self.precisions,
                                                        *self.precision_aliases)))
        aliased = bool(precision) and precision in self.precision_aliases
        zeros = {z for m in self.modes_for(lora, precision if aliased else '')
                 for z in m.zero_stages}
        if zero_stages and not zeros & set(zero_stages):
            raise InputError(names['zero'], f'the {self.key} stack runs none of ZeRO '
                             f'{",".join(map(str, zero_stages))}'
                             + (f' with --precision {precision}' if aliased else ''),
                             ', '.join(map(str, sorted(zeros))))
        if recompute_modes and not set(self.recompute) & set(recompute_modes):
            raise InputError(names['recompute'], f'the {self.key} stack runs none of '
                             f'{",".join(recompute_modes)}', ', '.join(
                                 f'{k} ({v})' for k, v in self.recompute.items()))

    def check_layout(self, *, tp: int = 1, pp: int = 1, vpp: int = 1, cp: int = 1,
                     ep: int = 1, zero: int = 0, etp: int = 0, dp_replicate: int = 1,
                     lora: bool = False) -> None:
        """Raise InputError when this stack does not run the layout (``etp`` 0: as TP)."""
        hybrid = self.hybrid_shard_stages(lora)
        if dp_replicate > 1 and zero not in hybrid:
            why = (f' with ZeRO {zero}' + (' under LoRA' if lora else '') if self.hybrid_shard
                   else f' ({self.no_hybrid_shard})' if self.no_hybrid_shard else '')
            raise InputError('--dp-replicate', f'the {self.key} stack has no HSDP{why}',
                             '1' + (f', or --zero {" or ".join(map(str, hybrid))}'
                                    if hybrid else ''))
        if etp and etp != tp and not self.expert_tensor_parallel:
            raise InputError('--etp', f'the {self.key} stack splits each expert over the TP '
                             'ranks', f'{tp} (the TP size), or --framework megatron')
        axes = (('--tp', tp, self.tensor_parallel), ('--pp', pp, self.pipeline_parallel),
                ('--vpp', vpp, self.virtual_stages), ('--cp', cp, self.context_parallel),
                ('--ep', ep, self.expert_parallel))
        for flag, value, runs in axes:
            if value > 1 and not runs:
                raise InputError(flag, f'the {self.key} stack does not run {flag[2:]} > 1', '1')
        if pp > 1 and zero not in self.zero_with_pp:
            raise InputError('--zero', f'the {self.key} stack does not run ZeRO {zero} with a '
                             'pipeline', ', '.join(map(str, self.zero_with_pp)) or 'no PP')
        if zero == 0 and not self.zero0_with_split and tp * pp * cp > 1:
            raise InputError('--zero', f'the {self.key} stack composes TP/PP/CP with FSDP '
                             '(ZeRO 2-3), not with replicated DDP', '2, 3')

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (for ``--json`` and the app)."""
        return {'key': self.key, 'label': self.label, 'description': self.description,
                'modes': [{'name': m.name, 'zero_stages': list(m.zero_stages),
                           'precision': m.precision} for m in self.modes],
                'precisions': list(self.precisions), 'recompute': dict(self.recompute),
                'precision_aliases': {k: dict(v) for k, v in self.precision_aliases.items()},
                'options': list(self.options), 'launchers': list(self.launchers),
                'losses': list(self.losses),
                'loss_model_types': {k: sorted(v) for k, v in self.loss_model_types.items()}}

