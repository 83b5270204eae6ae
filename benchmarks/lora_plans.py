"""LoRA and QLoRA plans: batchfit's step time and memory against full training and against
published figures.

Run ``.venv/bin/python -m benchmarks.lora_plans`` from the repository root. It prints
markdown (the ``lora_plans`` section of docs/BENCHMARKS.md):

A. the best plan ``batchfit plan`` finds for Llama-3.1-8B on one node of 8 H100 for full
   training, LoRA (rank 16 on q, k, v, o, and on all seven projections) and QLoRA;
B. the same layouts timed for every method (LoRA against full step time, and DP traffic);
C. QLoRA on one GPU: Llama-3.1-8B on an A100-80GB and an RTX 4090, Llama-3.1-70B on an
   A100-80GB;
D. published figures beside batchfit's estimate for the same configuration: torchtune's
   memory and throughput table, the Hugging Face + FA2 QLoRA context lengths of Unsloth's
   README, LLaMA-Factory's hardware table, the QLoRA paper's 65B-on-48-GB claim and the
   LoRA paper's training speed-up. Each row names its source; the configurations are
   transcribed from the sources' own configs where they give them.

Memory is ``planner.memory.peak.estimate`` (total with CUDA context, workspaces and allocator
reserve, margin 0 for fit questions); time is ``planner.timing.step_time.step_time_arrays`` with
the default (uncalibrated) efficiency curves and ``framework='hf'`` (PEFT is eager
PyTorch). No GPU was used: every batchfit number is a model estimate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from planner.hardware.catalog import find_gpu, find_interconnect
from planner.hardware.devices import GpuSpec
from planner.memory.model_states import lora_params
from planner.memory.peak import estimate
from planner.memory.training import LoraSpec, TrainingSetup
from planner.models.presets import find_preset
from planner.models.spec import ModelSpec
from planner.plans.request import PlanRequest
from planner.plans.search import search
from planner.timing.step_time import (
    RECOMPUTE_MODES,
    LayoutArrays,
    StepTimeArrays,
    TrainingLength,
    step_time_arrays,
)

GIB = 2**30
QKVO = ('q', 'k', 'v', 'o')
ALL = ('q', 'k', 'v', 'o', 'gate', 'up', 'down')
METHODS: dict[str, LoraSpec | None] = {
    'full fine-tuning': None,
    'LoRA r16 q,k,v,o': LoraSpec(16, QKVO),
    'LoRA r16 all linear': LoraSpec(16, ALL),
    'QLoRA r16 all linear': LoraSpec(16, ALL, 4),
}


@dataclasses.dataclass(frozen=True)
class Config:
    """One training configuration on ``dp`` GPUs of one kind (data parallel)."""

    model: ModelSpec
    gpu: GpuSpec
    seq_len: int
    micro_batch: int
    grad_accum: int = 1
    dp: int = 1
    zero: int = 0
    recompute: str = 'full'
    lora: LoraSpec | None = None
    precision: str = 'amp-bf16'
    optimizer: str = 'adamw'

    def setup(self) -> TrainingSetup:
        return TrainingSetup(seq_len=self.seq_len, micro_batch=self.micro_batch,
                             grad_accum=self.grad_accum, dp=self.dp, zero=self.zero,
                             recompute=self.recompute, lora=self.lora,
                             precision=self.precision, optimizer=self.optimizer)

    def memory_gib(self) -> float:
        """The estimated per-GPU total (tensors + CUDA context, workspaces, reserve)."""
        return estimate(self.model, self.setup(), self.gpu).total_bytes / GIB

    def step(self) -> StepTimeArrays:
        a = np.asarray
        per_node = min(self.dp, 8)
        layout = LayoutArrays(
            nodes=a(max(1, self.dp // per_node)), gpus_per_node=a(per_node), tp=a(1), pp=a(1),
            vpp=a(1), cp=a(1), dp=a(self.dp), micro_batch=a(self.micro_batch),
            grad_accum=a(self.grad_accum), zero=a(self.zero),
            recompute=a(RECOMPUTE_MODES.index(self.recompute)), sequence_parallel=a(False))
        return step_time_arrays(self.model, self.seq_len, self.gpu, find_interconnect('ib-ndr'),
                                layout, precision=self.precision, optimizer=self.optimizer,
                                attention='flash', framework='hf', lora=self.lora)

    def tokens_per_s(self) -> float:
        return float(self.step().tokens_per_s)


def sized(gpu: str, gib: float) -> GpuSpec:
    """``gpu`` with ``gib`` GiB of memory (for the context-length tables)."""
    return dataclasses.replace(find_gpu(gpu), memory_bytes=int(gib * GIB))


def largest(fits: Callable[[int], bool], low: int, high: int, step: int) -> int | None:
    """The largest multiple of ``step`` in [low, high] for which ``fits`` holds (monotone)."""
    if not fits(low):
        return None
    lo, hi = low // step, high // step
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid * step) else (lo, mid - 1)
    return lo * step


def _pct(value: float) -> str:
    return f'{value:.0%}'


# ---- A, B, C: batchfit's own plans ----------------------------------------------------------

def best_plans() -> list[str]:
    """A: the best plan per method for Llama-3.1-8B on 8 x H100."""
    model, gpu = find_preset('llama-3.1-8b'), find_gpu('h100-sxm')
    lines = ['**A. Best plan per method: Llama-3.1-8B, sequence 4096, global batch 64 '
             '(262,144 tokens), 1B tokens, one node of 8 × H100 SXM, amp-bf16, AdamW, '
             '`--framework hf`** (`batchfit plan ... --lora-rank 16 [--lora-targets ...] '
             '[--qlora]`):', '',
             '| method | trainable | GPUs | ZeRO | recompute | micro×acc | GiB/GPU | step s '
             '| tokens/s | MFU | MFU if 6N | memory-bound | dequant | GPU-h for 1B tokens |',
             '|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|']
    for name, lora in METHODS.items():
        req = PlanRequest(model=model, seq_len=4096, gpu=gpu, max_nodes=1, gpus_per_node=8,
                          global_batch=64, length=TrainingLength(tokens=1e9), lora=lora)
        result = search(req)
        c = result.best
        trainable = model.total_params() if lora is None else lora_params(model, lora)
        six_n = (6 * model.total_params() * c.tokens_per_s
                 / (c.gpus * gpu.peak('bf16')))
        lines.append(
            f'| {name} | {trainable / 1e6:,.1f} M | {c.gpus} | {c.zero} | {c.recompute} | '
            f'{c.micro_batch}×{c.grad_accum} | {c.memory.total_bytes / GIB:.1f} | '
            f'{c.step_time_s:.2f} | {c.tokens_per_s:,.0f} | {_pct(c.mfu)} | {_pct(six_n)} | '
            f'{_pct(c.step_breakdown_s["elementwise_s"] / c.step_time_s)} | '
            f'{_pct(c.dequant_s / c.step_time_s)} | {c.gpu_hours:.1f} |')
    return lines


def same_layout() -> list[str]:
    """B: every method timed at the same layouts."""
    model, gpu = find_preset('llama-3.1-8b'), find_gpu('h100-sxm')
    lines = ['**B. The same layout for every method** (Llama-3.1-8B, sequence 4096, DP 8 on '
             'one H100 node, micro-batch 2 × accumulation 4): step time in seconds, LoRA / '
             'full in brackets, and all DP/ZeRO traffic per step (hidden or not):', '',
             '| ZeRO | recompute | full s | LoRA q,k,v,o s | LoRA all s | QLoRA all s '
             '| traffic full s | LoRA all | QLoRA all |',
             '|---:|---|---:|---:|---:|---:|---:|---:|---:|']
    for zero in (0, 1, 2, 3):
        for recompute in ('none', 'full'):
            steps = {name: Config(model, gpu, 4096, 2, 4, 8, zero, recompute, lora).step()
                     for name, lora in METHODS.items()}
            full = float(steps['full fine-tuning'].step_time_s)

            def cell(name: str, full: float = full, steps: dict = steps) -> str:
                value = float(steps[name].step_time_s)
                return f'{value:.2f} ({value / full:.2f})'

            traffic = [float(steps[n].dp_traffic_s) for n in
                       ('full fine-tuning', 'LoRA r16 all linear', 'QLoRA r16 all linear')]
            lines.append(f'| {zero} | {recompute} | {full:.2f} | {cell("LoRA r16 q,k,v,o")} | '
                         f'{cell("LoRA r16 all linear")} | {cell("QLoRA r16 all linear")} | '
                         f'{traffic[0]:.3f} | {traffic[1]:.3f} | {traffic[2]:.3f} |')
    return lines


def single_gpu_qlora() -> list[str]:
    """C: QLoRA plans on one GPU."""
    lines = ['**C. QLoRA r16 on all linear layers, one GPU** (sequence 2048, global batch 16, '
             'amp-bf16, AdamW; the best plan `batchfit plan` finds):', '',
             '| model | GPU | full fits? | bf16 LoRA fits? | QLoRA micro×acc | recompute '
             '| GiB | step s | tokens/s | dequant |',
             '|---|---|---|---|---|---|---:|---:|---:|---:|']
    for preset, gpu_key in (('llama-3.1-8b', 'a100-80g-sxm'), ('llama-3.1-8b', 'rtx-4090'),
                            ('llama-3.1-70b', 'a100-80g-sxm')):
        model, gpu = find_preset(preset), find_gpu(gpu_key)

        def plan(lora, model=model, gpu=gpu):
            return search(PlanRequest(model=model, seq_len=2048, gpu=gpu, max_nodes=1,
                                      gpus_per_node=1, global_batch=16,
                                      length=TrainingLength(tokens=1e8), lora=lora))

        full, lora, q = plan(None), plan(LoraSpec(16, ALL)), plan(LoraSpec(16, ALL, 4))
        c = q.best
        lines.append(
            f'| {model.name} | {gpu.name} | {"yes" if full.fitting else "no"} | '
            f'{"yes" if lora.fitting else "no"} | {c.micro_batch}×{c.grad_accum} | '
            f'{c.recompute} | {c.memory.total_bytes / GIB:.1f} | {c.step_time_s:.2f} | '
            f'{c.tokens_per_s:,.0f} | {_pct(c.dequant_s / c.step_time_s)} |')
    return lines


# ---- D: published figures ---------------------------------------------------------------------

TORCHTUNE = [  # model, method, GPU, GPUs, published GiB, published tokens/s
    ('llama-3.1-8b', 'full', 'rtx-4090', 1, 18.9, 1650),
    ('llama-3.1-8b', 'full', 'rtx-a6000', 1, 37.4, 2579),
    ('llama-3.1-8b', 'lora', 'rtx-4090', 1, 16.2, 3083),
    ('llama-3.1-8b', 'lora', 'rtx-a6000', 1, 30.3, 4699),
    ('llama-3.1-8b', 'qlora', 'rtx-4090', 1, 7.4, 2413),
    ('llama-3.1-70b', 'lora', 'a100-80g-sxm', 8, 27.6, 3497),
]


def torchtune_config(preset: str, method: str, gpu: str, gpus: int) -> Config:
    """torchtune's README setting (batch 2, packed to 2048) with its recipe configs:
    single-device full fine-tuning with bnb's paged 8-bit AdamW in the backward; LoRA and
    QLoRA rank 8 (16 for 70B) on q, k, v, o and the MLP (70B: q, v, o and the MLP), all in
    bf16 without autocast; activation checkpointing on; 70B over FSDP (ZeRO-3)."""
    model = find_preset(preset)
    if method == 'full':
        return Config(model, find_gpu(gpu), 2048, 2, dp=gpus, precision='bf16',
                      optimizer='adamw-8bit')
    targets = ('q', 'v', 'o', 'gate', 'up', 'down') if gpus > 1 else ALL
    lora = LoraSpec(16 if gpus > 1 else 8, targets, 4 if method == 'qlora' else 16)
    return Config(model, find_gpu(gpu), 2048, 2, dp=gpus, zero=3 if gpus > 1 else 0,
                  lora=lora, precision='bf16')


def torchtune_rows() -> list[str]:
    lines = ['**D1. torchtune\'s table** ([pytorch/torchtune README](https://github.com/pytorch/'
             'torchtune/blob/0031bfb080bd35ec533c412df883cf2bf7bf7fe4/README.md), "Memory and '
             'training speed": batch 2, packed to 2048 tokens, torch.compile on; configs '
             '`recipes/configs/llama3_1/8B_full_single_device.yaml`, `8B_lora_single_device'
             '.yaml`, `8B_qlora_single_device.yaml`, `70B_lora.yaml`). Tokens/s is the whole '
             'job\'s. "Implied MFU" is the published throughput counted with batchfit\'s FLOPs '
             '(full recompute, as the configs set it):', '',
             '| model | method | GPUs | published GiB | batchfit GiB | published tokens/s | '
             'batchfit tokens/s | implied MFU of the published figure |',
             '|---|---|---|---:|---:|---:|---:|---:|']
    speed = {}
    for preset, method, gpu, gpus, gib, tokens in TORCHTUNE:
        cfg = torchtune_config(preset, method, gpu, gpus)
        st = cfg.step()
        implied = tokens / float(st.tokens_per_s) * float(st.hfu)
        speed[(gpu, method, preset)] = (tokens, float(st.tokens_per_s))
        lines.append(f'| {cfg.model.name} | {method} | {gpus} × {cfg.gpu.name} | {gib} | '
                     f'{cfg.memory_gib():.1f} | {tokens:,} | {float(st.tokens_per_s):,.0f} | '
                     f'{_pct(implied)} |')
    ratios = []
    for gpu in ('rtx-4090', 'rtx-a6000'):
        pub_l, bf_l = speed[(gpu, 'lora', 'llama-3.1-8b')]
        pub_f, bf_f = speed[(gpu, 'full', 'llama-3.1-8b')]
        ratios.append(f'{find_gpu(gpu).name}: published {pub_l / pub_f:.2f}×, batchfit '
                      f'{bf_l / bf_f:.2f}×')
    pub_q, bf_q = speed[('rtx-4090', 'qlora', 'llama-3.1-8b')]
    pub_l, bf_l = speed[('rtx-4090', 'lora', 'llama-3.1-8b')]
    lines += ['', 'LoRA / full fine-tuning throughput: ' + '; '.join(ratios) + '. QLoRA / '
              f'LoRA on the RTX 4090: published {pub_q / pub_l:.2f}×, batchfit '
              f'{bf_q / bf_l:.2f}×.']
    return lines


UNSLOTH_8B = [(12, 932), (16, 2551), (24, 5789), (40, 12264), (48, 15502), (80, 28454)]
UNSLOTH_70B = [(48, None), (80, 6916)]


def unsloth_rows() -> list[str]:
    """Hugging Face + FA2 QLoRA context lengths from Unsloth's README."""
    lines = ['**D2. Longest sequence that fits, QLoRA rank 32 on all linear layers, batch 1** '
             '([unslothai/unsloth README](https://github.com/unslothai/unsloth/blob/'
             '000252c947fe9421071216c19fd53e5d0495a1c0/README.md), "Context length '
             'benchmarks", its "Hugging Face + FA2" column; Llama 3.3 70B has Llama 3.1 70B\'s '
             'shape). batchfit: amp-bf16, AdamW, a GPU of that many GiB, margin 0, with and '
             'without gradient checkpointing:', '',
             '| model | GPU memory | published (HF + FA2) | batchfit, full recompute '
             '| batchfit, no recompute |',
             '|---|---:|---:|---:|---:|']
    for preset, table in (('llama-3.1-8b', UNSLOTH_8B), ('llama-3.1-70b', UNSLOTH_70B)):
        model = find_preset(preset)
        for gib, published in table:
            cells = []
            for recompute in ('full', 'none'):
                gpu = sized('a100-80g-sxm', gib)

                def fits(seq, gpu=gpu, recompute=recompute, model=model):
                    cfg = Config(model, gpu, seq, 1, recompute=recompute,
                                 lora=LoraSpec(32, ALL, 4))
                    return cfg.memory_gib() * GIB <= gpu.memory_bytes

                best = largest(fits, 64, 400_000, 64)
                cells.append('OOM' if best is None else f'{best:,}')
            shown = 'OOM' if published is None else f'{published:,}'
            lines.append(f'| {model.name} | {gib} GB | {shown} | {cells[0]} | {cells[1]} |')
    return lines


LLAMA_FACTORY = [  # README size column, preset, published GB for LoRA 16-bit, QLoRA 8, QLoRA 4
    ('7B', 'llama-2-7b', 16, 10, 6), ('14B', 'qwen2.5-14b', 32, 20, 12),
    ('30B', 'llama-33b', 64, 40, 24), ('70B', 'llama-2-70b', 160, 80, 48),
]


def llamafactory_rows() -> list[str]:
    lines = ['**D3. LLaMA-Factory\'s hardware table** ([hiyouga/LLaMA-Factory README]'
             '(https://github.com/hiyouga/LLaMA-Factory/blob/'
             '00409ff28a30f48d13b808029d37861423673a4a/README.md), "Hardware Requirement", '
             'marked *estimated*, no sequence length given). batchfit: one GPU, LLaMA-Factory\'s '
             'defaults (rank 8 on all linear layers, gradient checkpointing, bf16 autocast, '
             'AdamW), micro-batch 1 of 512 and of 2048 tokens; GiB per GPU:', '',
             '| size | model | LoRA 16-bit: published | batchfit 512 / 2048 '
             '| QLoRA 8-bit: published | batchfit 512 / 2048 | QLoRA 4-bit: published '
             '| batchfit 512 / 2048 |',
             '|---|---|---:|---:|---:|---:|---:|---:|']
    for size, preset, *published in LLAMA_FACTORY:
        model = find_preset(preset)
        cells = [size, model.name]
        for bits, pub in zip((16, 8, 4), published, strict=True):
            est = [Config(model, sized('a100-80g-sxm', 1000), seq, 1,
                          lora=LoraSpec(8, ALL, bits)).memory_gib() for seq in (512, 2048)]
            cells += [f'{pub} GB', f'{est[0]:.1f} / {est[1]:.1f}']
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines


def paper_rows() -> list[str]:
    lines = ['**D4. Papers.**', '']
    # QLoRA (Dettmers et al. 2023): Guanaco 65B finetuned on a single 48 GB GPU. Settings of
    # artidoro/qlora scripts/finetune_guanaco_65b.sh: LoRA r64 on all linear layers, NF4 with
    # double quantization, bf16, gradient checkpointing, batch 4 of up to 16 + 512 tokens.
    model, a6000 = find_preset('llama-65b'), find_gpu('rtx-a6000')
    lora = LoraSpec(64, ALL, 4)
    peft_default = Config(model, a6000, 528, 4, lora=lora).memory_gib()
    short = Config(model, a6000, 528, 1, lora=lora).memory_gib()
    lines.append(
        f'- QLoRA, Dettmers et al. 2023 (arXiv 2305.14314; [artidoro/qlora](https://github.com/'
        'artidoro/qlora) `scripts/finetune_guanaco_65b.sh`): Guanaco 65B "on a single 48GB '
        'GPU", LoRA r64 on all linear layers, NF4 + double quantization, gradient '
        'checkpointing, batch 4 of up to 528 tokens, paged AdamW. batchfit (LLaMA-65B, the '
        f'same settings): {peft_default:.1f} GiB at batch 4, {short:.1f} GiB at batch 1, '
        f'against {a6000.memory_bytes / GIB:.0f} GiB on an RTX A6000. batchfit keeps the '
        f'{lora_params(model, lora) / 1e6:,.0f} M adapter parameters in fp32 with fp32 '
        'gradients and AdamW states (PEFT\'s default, 16 B each); `qlora.py` casts the LoRA '
        'layers to bf16 and pages the optimizer states out to CPU memory under pressure, '
        f'which saves about {lora_params(model, lora) * (4 + 4 + 8 - 2 - 2) / GIB:.1f} GiB.')
    # LoRA (Hu et al. 2021) §4.2: 25 % training speed-up on GPT-3 175B (r 4 on q, v).
    gpt3 = find_preset('gpt3-175b')
    full = search(PlanRequest(model=gpt3, seq_len=2048, gpu=find_gpu('a100-80g-sxm'),
                              max_nodes=16, gpus_per_node=8,
                              inter_node=find_interconnect('ib-hdr'), global_batch=128,
                              length=TrainingLength(tokens=1e9))).best
    a = np.asarray
    layout = LayoutArrays(nodes=a(full.nodes), gpus_per_node=a(full.gpus_per_node),
                          tp=a(full.tp), pp=a(full.pp), vpp=a(full.vpp), cp=a(full.cp),
                          dp=a(full.dp), micro_batch=a(full.micro_batch),
                          grad_accum=a(full.grad_accum), zero=a(full.zero),
                          recompute=a(RECOMPUTE_MODES.index(full.recompute)),
                          sequence_parallel=a(full.sequence_parallel))
    args = (gpt3, 2048, find_gpu('a100-80g-sxm'), find_interconnect('ib-hdr'), layout)
    t_full = float(step_time_arrays(*args, precision='amp-bf16', framework='hf').step_time_s)
    t_lora = float(step_time_arrays(*args, precision='amp-bf16', framework='hf',
                                    lora=LoraSpec(4, ('q', 'v'))).step_time_s)
    lines.append(
        '- LoRA, Hu et al. 2021 (arXiv 2106.09685, §4.2): "a 25% speedup during training on '
        'GPT-3 175B compared to full fine-tuning" (r 4 on q and v; hardware and layout not '
        f'given). batchfit at its best full-training layout on 128 × A100-80GB (tp/pp/cp/dp '
        f'{full.layout}, ZeRO {full.zero}, recompute {full.recompute}): {t_full:.1f} s '
        f'against {t_lora:.1f} s per step, a {t_full / t_lora - 1:.0%} speed-up.')
    return lines


def main() -> int:
    """Print the markdown section."""
    blocks = [best_plans(), same_layout(), single_gpu_qlora(), torchtune_rows(), unsloth_rows(),
              llamafactory_rows(), paper_rows()]
    print('\n\n'.join('\n'.join(block) for block in blocks))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
