<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN" sourcelanguage="en">
<context>
    <name>App</name>
    <message>
        <source>Something went wrong: {error}

The details are in the log folder:
{folder}</source>
        <translation>出错了：{error}

详细信息在日志文件夹中：
{folder}</translation>
    </message>
    <message>
        <source>Ignore and try to continue</source>
        <translation>忽略并继续</translation>
    </message>
</context>
<context>
    <name>CalibrationDialog</name>
    <message>
        <source>Calibrate on this machine</source>
        <translation>在本机上校准</translation>
    </message>
    <message>
        <source>Times matmuls and a proxy training step of {m} (sequence {s}) in a separate process with torch, then saves a profile that plans use instead of the default efficiency curve.</source>
        <translation>在独立的 torch 进程中测量 {m}（序列长度 {s}）的矩阵乘法和代理训练步耗时，然后保存一份校准配置，之后的规划将用它代替默认的效率曲线。</translation>
    </message>
    <message>
        <source>GPU {u}</source>
        <translation>GPU {u}</translation>
    </message>
    <message>
        <source>Done</source>
        <translation>完成</translation>
    </message>
    <message>
        <source>Cancelled</source>
        <translation>已取消</translation>
    </message>
    <message>
        <source>torch or numpy is missing</source>
        <translation>缺少 torch 或 numpy</translation>
    </message>
    <message>
        <source>no usable CUDA device</source>
        <translation>没有可用的 CUDA 设备</translation>
    </message>
    <message>
        <source>out of memory</source>
        <translation>内存不足</translation>
    </message>
    <message>
        <source>the model does not fit</source>
        <translation>模型放不下</translation>
    </message>
    <message>
        <source>an input was refused</source>
        <translation>有输入被拒绝</translation>
    </message>
    <message>
        <source>timed out</source>
        <translation>超时</translation>
    </message>
    <message>
        <source>the calibration failed</source>
        <translation>校准失败</translation>
    </message>
    <message>
        <source>about {n:.0f} s</source>
        <translation>约 {n:.0f} 秒</translation>
    </message>
    <message>
        <source>about {n:.0f} min</source>
        <translation>约 {n:.0f} 分钟</translation>
    </message>
    <message>
        <source>about {n:.1f} h</source>
        <translation>约 {n:.1f} 小时</translation>
    </message>
    <message>
        <source>CPU: quick check (a few tokens, under a minute on 2 cores)</source>
        <translation>CPU：快速检查（少量 token，2 核上不到一分钟）</translation>
    </message>
    <message>
        <source>CPU: full calibration (not a GPU profile)</source>
        <translation>CPU：完整校准（不生成 GPU 校准配置）</translation>
    </message>
    <message>
        <source>device</source>
        <translation>设备</translation>
    </message>
    <message>
        <source>this interpreter</source>
        <translation>当前解释器</translation>
    </message>
    <message>
        <source>A Python with torch installed (your training environment); blank: the one running batchfit.</source>
        <translation>已安装 torch 的 Python（即你的训练环境）；留空则使用运行 batchfit 的 Python。</translation>
    </message>
    <message>
        <source>python3 or python on PATH, if it has torch</source>
        <translation>PATH 中的 python3 或 python（需已安装 torch）</translation>
    </message>
    <message>
        <source>Python with torch</source>
        <translation>带 torch 的 Python</translation>
    </message>
    <message>
        <source>Not started.</source>
        <translation>尚未开始。</translation>
    </message>
    <message>
        <source>quantity</source>
        <translation>项目</translation>
    </message>
    <message>
        <source>micro-batch × sequence</source>
        <translation>微批次 × 序列长度</translation>
    </message>
    <message>
        <source>measured</source>
        <translation>实测</translation>
    </message>
    <message>
        <source>batchfit predicts</source>
        <translation>batchfit 预测</translation>
    </message>
    <message>
        <source>difference</source>
        <translation>差异</translation>
    </message>
    <message>
        <source>Start</source>
        <translation>开始</translation>
    </message>
    <message>
        <source>Cancel run</source>
        <translation>取消运行</translation>
    </message>
    <message>
        <source>Close</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>The quick check times a few tokens on the CPU and then says how long a full calibration would take.</source>
        <translation>快速检查在 CPU 上对少量 token 计时，然后告诉你完整校准需要多长时间。</translation>
    </message>
    <message>
        <source>A full CPU calibration at sequence {s} takes {t} here (estimated from the quick check).</source>
        <translation>在本机上以序列长度 {s} 做完整 CPU 校准需要{t}（根据快速检查估算）。</translation>
    </message>
    <message>
        <source>A full CPU calibration can take many minutes: run the quick check first to see how long.</source>
        <translation>完整 CPU 校准可能需要很多分钟：请先运行快速检查以了解所需时间。</translation>
    </message>
    <message>
        <source>{p} does not run: enter the path of a Python 3.10 or later that has torch.</source>
        <translation>{p} 无法运行：请填写已安装 torch 的 Python 3.10 或更高版本的路径。</translation>
    </message>
    <message>
        <source>{p} lacks {m}. Install with:
{cmd}
or enter another Python above.</source>
        <translation>{p} 缺少 {m}。安装命令：
{cmd}
或在上方填写另一个 Python。</translation>
    </message>
    <message>
        <source>No Python with torch found: run &quot;pip install torch&quot; in a Python 3.10 or later, then enter that python above.</source>
        <translation>未找到安装了 torch 的 Python：请在 Python 3.10 或更高版本中运行 &quot;pip install torch&quot;，然后在上方填写该 python 的路径。</translation>
    </message>
    <message>
        <source>Starting…</source>
        <translation>正在启动…</translation>
    </message>
    <message>
        <source>Profile saved to {p}, but it cannot be read back: {e}</source>
        <translation>校准配置已保存到 {p}，但无法读回：{e}</translation>
    </message>
    <message>
        <source>step time (s)</source>
        <translation>单步耗时 (s)</translation>
    </message>
    <message>
        <source>peak memory (GiB)</source>
        <translation>峰值内存 (GiB)</translation>
    </message>
    <message>
        <source>Applied: plans for this GPU now use it.</source>
        <translation>已应用：此 GPU 的方案现在使用该配置。</translation>
    </message>
    <message>
        <source>A CPU profile is not applied to GPU plans.</source>
        <translation>CPU 校准配置不会用于 GPU 方案。</translation>
    </message>
    <message>
        <source>Done in {t:.0f} s. Profile saved to {p}. {applied}</source>
        <translation>用时 {t:.0f} 秒完成。校准配置已保存到 {p}。{applied}</translation>
    </message>
</context>
<context>
    <name>CandidateTableModel</name>
    <message>
        <source>time-to-train</source>
        <translation>训练时长</translation>
    </message>
    <message>
        <source>cost (GPU-hours)</source>
        <translation>成本（GPU 小时）</translation>
    </message>
    <message>
        <source>fewest GPUs</source>
        <translation>GPU 最少</translation>
    </message>
    <message>
        <source>most memory headroom</source>
        <translation>显存余量最大</translation>
    </message>
    <message>
        <source>Rank by the chosen order (near-ties go to the simpler layout). With one row per near-duplicate group, the ranks of the hidden near-duplicates are skipped (1, 3, 5…)</source>
        <translation>按所选顺序排名（相差极小时较简单的布局优先）。每组近似重复方案只显示一行时，被隐藏方案的名次会跳过（1、3、5…）</translation>
    </message>
    <message>
        <source>Activation recompute: none, selective (attention), full (whole layers), half (every other layer)</source>
        <translation>激活重计算：无、选择性（注意力部分）、完全（整层）、一半（隔层）</translation>
    </message>
    <message>
        <source>stack</source>
        <translation>技术栈</translation>
    </message>
    <message>
        <source>The software that runs the plan (its precision, recompute and launchers)</source>
        <translation>运行该方案的软件（其精度、重计算与启动器）</translation>
    </message>
    <message>
        <source>GPUs</source>
        <translation>GPU 数</translation>
    </message>
    <message>
        <source>GPUs used = TP × PP × CP × DP</source>
        <translation>使用的 GPU 数 = TP × PP × CP × DP</translation>
    </message>
    <message>
        <source>nodes</source>
        <translation>节点数</translation>
    </message>
    <message>
        <source>Nodes used (the fewest that hold the GPUs)</source>
        <translation>使用的节点数（容纳这些 GPU 所需的最少节点数）</translation>
    </message>
    <message>
        <source>Tensor / pipeline (× virtual stages) / context / data parallel sizes</source>
        <translation>张量 / 流水线（× 虚拟阶段数）/ 上下文 / 数据并行度</translation>
    </message>
    <message>
        <source>micro×accum</source>
        <translation>微批×累积</translation>
    </message>
    <message>
        <source>Micro-batch × gradient accumulation; global batch = micro × accum × DP</source>
        <translation>微批次大小 × 梯度累积步数；全局批大小 = 微批次 × 累积步数 × DP</translation>
    </message>
    <message>
        <source>ZeRO stage: 0 plain DP, 1 optimizer states, 2 + gradients, 3 + weights sharded</source>
        <translation>ZeRO 阶段：0 为普通 DP；1 切分优化器状态；2 再切分梯度；3 再切分权重</translation>
    </message>
    <message>
        <source>recompute</source>
        <translation>重计算</translation>
    </message>
    <message>
        <source>memory (GiB)</source>
        <translation>显存 (GiB)</translation>
    </message>
    <message>
        <source>Per-GPU peak incl. CUDA context and allocator reserve (≈ nvidia-smi)</source>
        <translation>单卡峰值显存，含 CUDA 上下文和分配器预留（≈ nvidia-smi 读数）</translation>
    </message>
    <message>
        <source>headroom (GiB)</source>
        <translation>余量 (GiB)</translation>
    </message>
    <message>
        <source>Usable memory (capacity less the margin) left at the peak</source>
        <translation>峰值时剩余的可用显存（容量减去预留部分）</translation>
    </message>
    <message>
        <source>step (s)</source>
        <translation>单步 (s)</translation>
    </message>
    <message>
        <source>Time of one optimizer step</source>
        <translation>一个训练步（一次优化器更新）的耗时</translation>
    </message>
    <message>
        <source>Training throughput of the whole job</source>
        <translation>整个训练任务的吞吐量</translation>
    </message>
    <message>
        <source>Model FLOPs utilisation: model FLOPs per second ÷ peak</source>
        <translation>模型 FLOPs 利用率：每秒模型 FLOPs ÷ 峰值算力</translation>
    </message>
    <message>
        <source>time (days)</source>
        <translation>时长 (天)</translation>
    </message>
    <message>
        <source>Time-to-train = steps × step time</source>
        <translation>训练时长 = 步数 × 单步耗时</translation>
    </message>
    <message>
        <source>GPU-hours</source>
        <translation>GPU 小时</translation>
    </message>
    <message>
        <source>GPUs × time-to-train</source>
        <translation>GPU 数 × 训练时长</translation>
    </message>
    <message>
        <source>cost (USD)</source>
        <translation>成本 (USD)</translation>
    </message>
    <message>
        <source>GPU-hours × price per GPU-hour</source>
        <translation>GPU 小时 × 每 GPU 小时单价</translation>
    </message>
    <message>
        <source>Pareto</source>
        <translation>帕累托</translation>
    </message>
    <message>
        <source>On the time-to-train vs GPU-hours front</source>
        <translation>位于训练时长与 GPU 小时的帕累托前沿上</translation>
    </message>
    <message>
        <source>yes</source>
        <translation>是</translation>
    </message>
</context>
<context>
    <name>Core</name>
    <message>
        <source>weights</source>
        <translation>权重</translation>
    </message>
    <message>
        <source>gradients</source>
        <translation>梯度</translation>
    </message>
    <message>
        <source>optimizer states (+ master)</source>
        <translation>优化器状态（含主权重）</translation>
    </message>
    <message>
        <source>optimizer step temporaries</source>
        <translation>优化器更新临时张量</translation>
    </message>
    <message>
        <source>activations</source>
        <translation>激活值</translation>
    </message>
    <message>
        <source>logits and loss buffers</source>
        <translation>logits 与损失缓冲区</translation>
    </message>
    <message>
        <source>model output held by the loop</source>
        <translation>训练循环持有的模型输出</translation>
    </message>
    <message>
        <source>eager attention scores (transient)</source>
        <translation>eager 注意力分数（临时）</translation>
    </message>
    <message>
        <source>forward temporaries</source>
        <translation>前向临时张量</translation>
    </message>
    <message>
        <source>autocast weight copies</source>
        <translation>autocast 权重副本</translation>
    </message>
    <message>
        <source>backward temporaries</source>
        <translation>反向临时张量</translation>
    </message>
    <message>
        <source>ZeRO-3 gathered layers</source>
        <translation>ZeRO-3 聚合的层</translation>
    </message>
    <message>
        <source>unsharded grads before reduce-scatter</source>
        <translation>reduce-scatter 前的未切分梯度</translation>
    </message>
    <message>
        <source>DDP/ZeRO buckets</source>
        <translation>DDP/ZeRO 通信桶</translation>
    </message>
    <message>
        <source>CUDA context</source>
        <translation>CUDA 上下文</translation>
    </message>
    <message>
        <source>cuBLAS/NCCL workspaces</source>
        <translation>cuBLAS/NCCL 工作区</translation>
    </message>
    <message>
        <source>allocator reserve</source>
        <translation>分配器预留</translation>
    </message>
    <message>
        <source>forward end</source>
        <translation>前向结束</translation>
    </message>
    <message>
        <source>backward start</source>
        <translation>反向开始</translation>
    </message>
    <message>
        <source>backward end</source>
        <translation>反向结束</translation>
    </message>
    <message>
        <source>optimizer step</source>
        <translation>优化器更新</translation>
    </message>
    <message>
        <source>compute</source>
        <translation>计算</translation>
    </message>
    <message>
        <source>elementwise</source>
        <translation>逐元素运算</translation>
    </message>
    <message>
        <source>bubble</source>
        <translation>流水线气泡</translation>
    </message>
    <message>
        <source>tp comm</source>
        <translation>TP 通信</translation>
    </message>
    <message>
        <source>cp comm</source>
        <translation>CP 通信</translation>
    </message>
    <message>
        <source>pp comm</source>
        <translation>PP 通信</translation>
    </message>
    <message>
        <source>dp comm</source>
        <translation>DP 通信</translation>
    </message>
    <message>
        <source>ep comm</source>
        <translation>EP 通信</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>gradient checkpointing (whole layers)</source>
        <translation>梯度检查点（整层）</translation>
    </message>
    <message>
        <source>activation checkpointing (whole layers)</source>
        <translation>激活检查点（整层）</translation>
    </message>
    <message>
        <source>selective (op-level SAC)</source>
        <translation>选择性（算子级 SAC）</translation>
    </message>
    <message>
        <source>selective (core attention)</source>
        <translation>选择性（核心注意力）</translation>
    </message>
    <message>
        <source>full (uniform, every layer)</source>
        <translation>完全（均匀，每层）</translation>
    </message>
    <message>
        <source>selective (every 2nd layer)</source>
        <translation>选择性（每隔一层）</translation>
    </message>
    <message>
        <source>full, block (half of each chunk&apos;s layers)</source>
        <translation>完全，分块（每个模型块的一半层）</translation>
    </message>
    <message>
        <source>optimizer</source>
        <translation>优化器</translation>
    </message>
    <message>
        <source>overhead</source>
        <translation>其他开销</translation>
    </message>
    <message>
        <source>none</source>
        <translation>无</translation>
    </message>
    <message>
        <source>selective</source>
        <translation>选择性</translation>
    </message>
    <message>
        <source>full</source>
        <translation>完全</translation>
    </message>
    <message>
        <source>half</source>
        <translation>一半</translation>
    </message>
    <message>
        <source>everything in fp32, as plain PyTorch (16 B/param with Adam)</source>
        <translation>全部使用 fp32，与原生 PyTorch 一致（配合 Adam 时每参数 16 B）</translation>
    </message>
    <message>
        <source>fp32 tensors, matmuls on TF32 tensor cores</source>
        <translation>张量为 fp32，矩阵乘法在 TF32 Tensor Core 上执行</translation>
    </message>
    <message>
        <source>torch.autocast(bf16) over fp32 parameters (HF Trainer --bf16)</source>
        <translation>在 fp32 参数上使用 torch.autocast(bf16)（HF Trainer --bf16）</translation>
    </message>
    <message>
        <source>torch.autocast(fp16) over fp32 parameters with a GradScaler</source>
        <translation>在 fp32 参数上使用 torch.autocast(fp16)，并配合 GradScaler</translation>
    </message>
    <message>
        <source>FSDP2 MixedPrecisionPolicy: fp32 sharded weights, grads and Adam (16 B/param over d), bf16 all-gather and compute, no autocast</source>
        <translation>FSDP2 MixedPrecisionPolicy：fp32 分片权重、梯度与 Adam（每参数 16 B，除以 d），bf16 all-gather 与计算，无 autocast</translation>
    </message>
    <message>
        <source>DeepSpeed bf16: bf16 weights and grads, fp32 master + Adam, an fp32 gradient accumulation buffer with ZeRO 0-1</source>
        <translation>DeepSpeed bf16：bf16 权重与梯度，fp32 主权重 + Adam，ZeRO 0-1 时另有 fp32 梯度累加缓冲</translation>
    </message>
    <message>
        <source>Megatron/DeepSpeed: bf16 weights, fp32 grads and master (18 B/param)</source>
        <translation>Megatron/DeepSpeed：bf16 权重，fp32 梯度和主权重（每参数 18 B）</translation>
    </message>
    <message>
        <source>ZeRO paper mixed precision: fp16 weights and grads, fp32 master + Adam (16 B/param, K=12)</source>
        <translation>ZeRO 论文中的混合精度：fp16 权重和梯度，fp32 主权重 + Adam（每参数 16 B，K=12）</translation>
    </message>
    <message>
        <source>pure bf16: weights, grads and optimizer states in bf16 (8 B/param)</source>
        <translation>纯 bf16：权重、梯度和优化器状态均为 bf16（每参数 8 B）</translation>
    </message>
    <message>
        <source>Transformer Engine fp8 matmuls over bf16-mixed (18 B/param + fp8 weight copies)</source>
        <translation>在 bf16-mixed 基础上用 Transformer Engine 做 fp8 矩阵乘法（每参数 18 B + fp8 权重副本）</translation>
    </message>
    <message>
        <source>torchtitan float8: FSDP2 MixedPrecisionPolicy (fp32 shards, bf16 compute) with torchao Float8Linear layers (tensorwise, fp8 all-gather)</source>
        <translation>torchtitan float8：FSDP2 MixedPrecisionPolicy（fp32 分片，bf16 计算），线性层换成 torchao Float8Linear（按张量缩放，fp8 all-gather）</translation>
    </message>
    <message>
        <source>Hugging Face</source>
        <translation>Hugging Face</translation>
    </message>
    <message>
        <source>HF + DeepSpeed</source>
        <translation>HF + DeepSpeed</translation>
    </message>
    <message>
        <source>torchtitan</source>
        <translation>torchtitan</translation>
    </message>
    <message>
        <source>Megatron-LM</source>
        <translation>Megatron-LM</translation>
    </message>
    <message>
        <source>DeepSpeed pipeline</source>
        <translation>DeepSpeed 流水线</translation>
    </message>
    <message>
        <source>HF Trainer / accelerate: DDP with autocast, or FSDP2; whole-layer checkpointing; data parallel only</source>
        <translation>HF Trainer / accelerate：带 autocast 的 DDP，或 FSDP2；整层检查点；仅数据并行</translation>
    </message>
    <message>
        <source>HF Trainer with DeepSpeed ZeRO 0-3: bf16 module, fp32 master and states, no autocast</source>
        <translation>HF Trainer 配合 DeepSpeed ZeRO 0-3：bf16 模块，fp32 主权重与状态，无 autocast</translation>
    </message>
    <message>
        <source>FSDP2/HSDP x TP x PP x CP x EP, bf16 parameters with fp32 reduction, no autocast</source>
        <translation>FSDP2/HSDP × TP × PP × CP × EP，bf16 参数、fp32 归约，无 autocast</translation>
    </message>
    <message>
        <source>Megatron-Core: TP+SP, PP+VPP, CP, EP, distributed optimizer (ZeRO-1), Transformer Engine kernels</source>
        <translation>Megatron-Core：TP+SP、PP+VPP、CP、EP，分布式优化器（ZeRO-1），Transformer Engine 内核</translation>
    </message>
    <message>
        <source>DeepSpeed engine with its pipeline: TP, PP (1F1B), ZeRO 0-1</source>
        <translation>DeepSpeed 引擎及其流水线：TP、PP（1F1B）、ZeRO 0-1</translation>
    </message>
    <message>
        <source>AdamW: first and second moments</source>
        <translation>AdamW：一阶矩和二阶矩</translation>
    </message>
    <message>
        <source>Adam: first and second moments</source>
        <translation>Adam：一阶矩和二阶矩</translation>
    </message>
    <message>
        <source>bitsandbytes 8-bit AdamW: block-quantised moments</source>
        <translation>bitsandbytes 8-bit AdamW：分块量化的一阶矩和二阶矩</translation>
    </message>
    <message>
        <source>SGD with momentum: one buffer</source>
        <translation>带动量的 SGD：一份动量缓冲</translation>
    </message>
    <message>
        <source>plain SGD: no state</source>
        <translation>普通 SGD：无状态</translation>
    </message>
    <message>
        <source>Adafactor without first moment: factored second moment</source>
        <translation>不含一阶矩的 Adafactor：分解存储的二阶矩</translation>
    </message>
    <message>
        <source>torchrun launch script (single or multi-node, static or c10d)</source>
        <translation>torchrun 启动脚本（单机或多机，static 或 c10d rendezvous）</translation>
    </message>
    <message>
        <source>accelerate launch script with its config YAML (DDP, FSDP, DeepSpeed)</source>
        <translation>accelerate 启动脚本及其 YAML 配置（DDP、FSDP、DeepSpeed）</translation>
    </message>
    <message>
        <source>DeepSpeed config JSON</source>
        <translation>DeepSpeed 配置 JSON</translation>
    </message>
    <message>
        <source>Hugging Face Trainer arguments under torchrun</source>
        <translation>通过 torchrun 启动的 Hugging Face Trainer 参数</translation>
    </message>
    <message>
        <source>Megatron-LM pretrain_gpt.py arguments under torchrun</source>
        <translation>通过 torchrun 启动的 Megatron-LM pretrain_gpt.py 参数</translation>
    </message>
    <message>
        <source>PyTorch Lightning Trainer settings (LightningCLI YAML)</source>
        <translation>PyTorch Lightning Trainer 设置（LightningCLI YAML）</translation>
    </message>
    <message>
        <source>torchtitan job config (TOML)</source>
        <translation>torchtitan 任务配置（TOML）</translation>
    </message>
    <message>
        <source>LLaMA-Factory training YAML</source>
        <translation>LLaMA-Factory 训练 YAML</translation>
    </message>
    <message>
        <source>Slurm batch script: srun + torchrun with c10d rendezvous</source>
        <translation>Slurm 批处理脚本：srun + torchrun，使用 c10d rendezvous</translation>
    </message>
    <message>
        <source>gradient noise scale given (--b-noise)</source>
        <translation>已给定梯度噪声尺度（--b-noise）</translation>
    </message>
    <message>
        <source>DeepSeek B_opt (no --b-noise given)</source>
        <translation>DeepSeek B_opt（未给定 --b-noise）</translation>
    </message>
    <message>
        <source>unknown (give --b-noise or a data size)</source>
        <translation>未知（请给出 --b-noise 或数据量）</translation>
    </message>
    <message>
        <source>linear rule with warmup (Goyal et al. 2017)</source>
        <translation>线性缩放规则 + 预热（Goyal et al. 2017）</translation>
    </message>
    <message>
        <source>square-root rule (Adam SDE, Malladi et al. 2022)</source>
        <translation>平方根缩放规则（Adam SDE，Malladi et al. 2022）</translation>
    </message>
    <message>
        <source>GPT-3 warmed up over 375M tokens (Brown et al. 2020)</source>
        <translation>GPT-3 在前 375M token 上预热（Brown et al. 2020）</translation>
    </message>
    <message>
        <source>the scaling rules hold below the critical batch; above it larger LRs stop paying off (McCandlish et al. 2018)</source>
        <translation>这些缩放规则只在临界批大小以下成立；超过临界批大小后，继续增大学习率不再有收益（McCandlish et al. 2018）</translation>
    </message>
    <message>
        <source>LoRA: the DeepSeek law is fitted on full pretraining, and LoRA recipes train at higher learning rates (QLoRA: 2e-4 up to 13B, 1e-4 above; LLaMA-Factory&apos;s LoRA examples 1e-4 where full fine-tuning uses 1e-5): give --base-lr and --base-batch from a LoRA recipe</source>
        <translation>LoRA：DeepSeek 定律是在全量预训练上拟合的，而 LoRA 方案使用更高的学习率（QLoRA：13B 及以下为 2e-4，更大的模型为 1e-4；LLaMA-Factory 的 LoRA 示例用 1e-4，而全参数微调用 1e-5）：请按某个 LoRA 方案给出 --base-lr 和 --base-batch</translation>
    </message>
    <message>
        <source>batchfit uses the catalog instead</source>
        <translation>batchfit 将改用硬件目录</translation>
    </message>
    <message>
        <source>environment</source>
        <translation>环境检查</translation>
    </message>
    <message>
        <source>matmul</source>
        <translation>矩阵乘法</translation>
    </message>
    <message>
        <source>proxy</source>
        <translation>代理模型</translation>
    </message>
    <message>
        <source>max_micro_batch</source>
        <translation>最大微批次</translation>
    </message>
    <message>
        <source>collectives</source>
        <translation>集合通信</translation>
    </message>
    <message>
        <source>fit</source>
        <translation>拟合</translation>
    </message>
    <message>
        <source>predicting</source>
        <translation>预测中</translation>
    </message>
    <message>
        <source>fitting the step-time model</source>
        <translation>正在拟合单步耗时模型</translation>
    </message>
    <message>
        <source>done</source>
        <translation>完成</translation>
    </message>
    <message>
        <source>all-reduce sweep</source>
        <translation>all-reduce 扫描</translation>
    </message>
    <message>
        <source>all-reduce sweep done</source>
        <translation>all-reduce 扫描完成</translation>
    </message>
    <message>
        <source>calibration finished</source>
        <translation>校准完成</translation>
    </message>
    <message>
        <source>calibration cancelled</source>
        <translation>校准已取消</translation>
    </message>
    <message>
        <source>global batch {batch}M tokens is {ratio}x the critical batch ({critical}M, {source}): more GPUs, little speed-up. Reaching a given loss takes {data}x the minimum data, and doubling the batch again would cut the steps only to {steps}</source>
        <translation>全局批大小 {batch}M token 是临界批大小（{critical}M，{source}）的 {ratio} 倍：再增加 GPU 也几乎不能提速。达到同样的损失需要最少数据量的 {data} 倍，而再把批大小翻倍，步数也只会降到当前的 {steps}</translation>
    </message>
    <message>
        <source>micro-batch {micro} ({gflop} GFLOP GEMMs per GPU) reaches only {fraction} of the efficiency this GPU attains on large GEMMs: a larger micro-batch or less tensor parallelism would use it better</source>
        <translation>微批次 {micro}（每卡 GEMM 为 {gflop} GFLOP）只达到该 GPU 在大规模 GEMM 上效率的 {fraction}：增大微批次或降低张量并行度能更充分地利用 GPU</translation>
    </message>
    <message>
        <source>micro-batch {micro} reaches only {fraction} of the efficiency this GPU attains on large GEMMs: a larger micro-batch or less tensor parallelism would use it better</source>
        <translation>微批次 {micro} 只达到该 GPU 在大规模 GEMM 上效率的 {fraction}：增大微批次或降低张量并行度能更充分地利用 GPU</translation>
    </message>
    <message>
        <source>{accum} micro-batches accumulated per step ({seconds} s per step): each optimizer step is slow; more data-parallel GPUs or a smaller global batch would give more updates per hour</source>
        <translation>每步累积 {accum} 个微批次（每步 {seconds} s）：每次优化器更新都很慢；增加数据并行的 GPU 或减小全局批大小，每小时能完成更多次参数更新</translation>
    </message>
    <message>
        <source>{accum} micro-batches accumulated per step: each optimizer step is slow; more data-parallel GPUs or a smaller global batch would give more updates per hour</source>
        <translation>每步累积 {accum} 个微批次：每次优化器更新都很慢；增加数据并行的 GPU 或减小全局批大小，每小时能完成更多次参数更新</translation>
    </message>
    <message>
        <source>DeepSeek scaling law at C = {compute} FLOPs: B_opt ~ {batch}M tokens, LR_opt ~ {lr} (AdamW, fitted on their data; a starting point, not a guarantee)</source>
        <translation>DeepSeek 缩放定律在 C = {compute} FLOPs 时给出：B_opt ~ {batch}M token，LR_opt ~ {lr}（AdamW，基于其数据拟合；仅作起点，并无保证）</translation>
    </message>
    <message>
        <source>global batch is {ratio}x below the critical batch: more data-parallel GPUs would still speed training up almost linearly</source>
        <translation>全局批大小仅为临界批大小的 1/{ratio}：增加数据并行的 GPU 仍能让训练近乎线性地加速</translation>
    </message>
    <message>
        <source>{note}; capped at 10 % of the run</source>
        <translation>{note}；上限为整个训练的 10 %</translation>
    </message>
    <message>
        <source>the reference warmup ({steps} steps of {tokens} tokens) kept in tokens</source>
        <translation>沿用参考配置的预热 token 总量（{steps} 步 × 每步 {tokens} token）</translation>
    </message>
    <message>
        <source>no NVIDIA driver found (libnvidia-ml.so): this machine has no NVIDIA GPU or the driver is not installed; {fallback}</source>
        <translation>未找到 NVIDIA 驱动（libnvidia-ml.so）：本机没有 NVIDIA GPU，或未安装驱动；{fallback}</translation>
    </message>
    <message>
        <source>the NVIDIA driver is installed but its kernel module is not loaded (NVML: Driver Not Loaded): run sudo modprobe nvidia or reboot; {fallback}</source>
        <translation>已安装 NVIDIA 驱动，但其内核模块未加载（NVML: Driver Not Loaded）：请运行 sudo modprobe nvidia 或重启；{fallback}</translation>
    </message>
    <message>
        <source>the NVIDIA driver library and the loaded kernel module are different versions, usually after a driver upgrade without a reboot: reboot, or reload the nvidia kernel modules; {fallback}</source>
        <translation>NVIDIA 驱动库与已加载的内核模块版本不一致，通常是升级驱动后未重启所致：请重启，或重新加载 nvidia 内核模块；{fallback}</translation>
    </message>
    <message>
        <source>no permission to open the NVIDIA devices (/dev/nvidia*): add your user to the group that owns them, or in a container pass the GPUs in (docker run --gpus all); {fallback}</source>
        <translation>没有打开 NVIDIA 设备（/dev/nvidia*）的权限：请将当前用户加入这些设备所属的用户组；在容器中则需要把 GPU 传入容器（docker run --gpus all）；{fallback}</translation>
    </message>
    <message>
        <source>NVML failed to start ({reason}): nvidia-smi shows whether the driver works; {fallback}</source>
        <translation>NVML 启动失败（{reason}）：可用 nvidia-smi 检查驱动是否正常；{fallback}</translation>
    </message>
    <message>
        <source>the NVIDIA driver {driver} is loaded but lists no GPUs (nvidia-smi -L lists what it sees; a container needs --gpus); {fallback}</source>
        <translation>NVIDIA 驱动 {driver} 已加载，但没有列出任何 GPU（nvidia-smi -L 会列出它看到的 GPU；容器需要 --gpus 参数）；{fallback}</translation>
    </message>
    <message>
        <source>calibration timed out after {seconds} s and was stopped</source>
        <translation>校准超时（{seconds} s），已停止</translation>
    </message>
    <message>
        <source>{layers}-layer proxy: memory at micro-batch {micro}</source>
        <translation>{layers} 层代理模型：测量微批次 {micro} 的显存</translation>
    </message>
    <message>
        <source>{layers}-layer proxy: timing</source>
        <translation>{layers} 层代理模型：计时</translation>
    </message>
    <message>
        <source>probing micro-batch {micro}</source>
        <translation>正在试探微批次 {micro}</translation>
    </message>
    <message>
        <source>largest micro-batch {micro}</source>
        <translation>最大微批次 {micro}</translation>
    </message>
    <message>
        <source>best GEMM {tflops} TFLOP/s</source>
        <translation>GEMM 最高 {tflops} TFLOP/s</translation>
    </message>
    <message>
        <source>{gemm} at {tokens} tokens</source>
        <translation>{gemm}：{tokens} 个 token</translation>
    </message>
    <message>
        <source>{device}: starting</source>
        <translation>{device}：启动中</translation>
    </message>
</context>
<context>
    <name>DetailPanel</name>
    <message>
        <source>parameters on this GPU × bytes per weight (÷ DP·CP under ZeRO-3); the parameters of one stage are (layers ÷ PP) layers ÷ TP, plus the embedding or head on the first/last stage</source>
        <translation>本卡参数量 × 每个权重的字节数（ZeRO-3 下再 ÷ DP·CP）；一个流水线阶段的参数为 (层数 ÷ PP) 层再 ÷ TP，首/末阶段另加嵌入层或输出头</translation>
    </message>
    <message>
        <source>parameters on this GPU × gradient bytes (÷ DP·CP under ZeRO-2/3); live during forward only when accumulating</source>
        <translation>本卡参数量 × 梯度字节数（ZeRO-2/3 下再 ÷ DP·CP）；只有梯度累积时才会在前向期间常驻</translation>
    </message>
    <message>
        <source>parameters × (optimizer state bytes + fp32 master copy) (÷ DP·CP under ZeRO-1/2/3)</source>
        <translation>参数量 × (优化器状态字节数 + fp32 主权重副本)（ZeRO-1/2/3 下再 ÷ DP·CP）</translation>
    </message>
    <message>
        <source>the optimizer step&apos;s temporaries (foreach buffers)</source>
        <translation>优化器更新时的临时张量（foreach 缓冲区）</translation>
    </message>
    <message>
        <source>saved bytes per layer (recompute mode, TP/SP and CP splits) × layers on the stage × micro-batches in flight (min(accum, PP) under 1F1B)</source>
        <translation>每层保存的激活字节数（取决于重计算模式及 TP/SP、CP 切分）× 本阶段层数 × 同时在途的微批次数（1F1B 下为 min(accum, PP)）</translation>
    </message>
    <message>
        <source>b·s·vocab logits and the loss&apos;s buffers on the last stage</source>
        <translation>末阶段 b·s·vocab 大小的 logits 及损失函数的缓冲区</translation>
    </message>
    <message>
        <source>eager attention: 2 × 4 bytes × b × heads/TP × s × s/CP</source>
        <translation>eager 注意力：2 × 4 字节 × b × heads/TP × s × s/CP</translation>
    </message>
    <message>
        <source>low-precision copies autocast keeps of each weight a saved matmul reads</source>
        <translation>autocast 为被保存的矩阵乘法所读取的每个权重保留的低精度副本</translation>
    </message>
    <message>
        <source>gradients alive while one layer runs backward (residual + MLP width)</source>
        <translation>单层反向传播期间存活的梯度（残差 + MLP 宽度）</translation>
    </message>
    <message>
        <source>ZeRO-3: whole layers gathered for compute (current + prefetched)</source>
        <translation>ZeRO-3：为计算而聚合的完整层（当前层 + 预取层）</translation>
    </message>
    <message>
        <source>ZeRO-2/3: a layer&apos;s full gradient before reduce-scatter</source>
        <translation>ZeRO-2/3：reduce-scatter 之前单层的完整梯度</translation>
    </message>
    <message>
        <source>DDP/ZeRO communication buckets</source>
        <translation>DDP/ZeRO 通信桶</translation>
    </message>
    <message>
        <source>CUDA driver context and loaded kernels (outside the allocator)</source>
        <translation>CUDA 驱动上下文与已加载的 kernel（不经过缓存分配器）</translation>
    </message>
    <message>
        <source>cuBLAS workspace + NCCL buffers when more than one GPU</source>
        <translation>cuBLAS 工作区 + 多卡时的 NCCL 缓冲区</translation>
    </message>
    <message>
        <source>caching-allocator reserve: 5 % of the tensor peak</source>
        <translation>缓存分配器预留：张量峰值的 5 %</translation>
    </message>
    <message>
        <source>step = compute + memory-bound ops + pipeline bubble + exposed TP/CP/PP/DP communication + optimizer + overhead (docs/time-model.md)</source>
        <translation>单步耗时 = 计算 + 访存受限算子 + 流水线气泡 + 未被计算掩盖的 TP/CP/PP/DP 通信 + 优化器 + 其他开销（docs/time-model.md）</translation>
    </message>
    <message>
        <source>tokens/s = global batch × sequence length ÷ step time</source>
        <translation>tokens/s = 全局批大小 × 序列长度 ÷ 单步耗时</translation>
    </message>
    <message>
        <source>MFU = 6·N·tokens/s (+ attention FLOPs) ÷ (GPUs × peak FLOP/s)</source>
        <translation>MFU = 6·N·tokens/s（+ 注意力 FLOPs）÷ (GPU 数 × 峰值 FLOP/s)</translation>
    </message>
    <message>
        <source>HFU counts recomputed FLOPs too</source>
        <translation>HFU 还计入重计算的 FLOPs</translation>
    </message>
    <message>
        <source>GEMM efficiency: achieved ÷ peak FLOP/s for this GEMM size (default curve per GPU family, or a calibration)</source>
        <translation>GEMM 效率：该 GEMM 规模下实际 FLOP/s ÷ 峰值 FLOP/s（来自按 GPU 系列的默认曲线或校准结果）</translation>
    </message>
    <message>
        <source>steps = training tokens ÷ (global batch × sequence length)</source>
        <translation>步数 = 训练 token 数 ÷ (全局批大小 × 序列长度)</translation>
    </message>
    <message>
        <source>time-to-train = steps × step time</source>
        <translation>训练时长 = 步数 × 单步耗时</translation>
    </message>
    <message>
        <source>GPU-hours = GPUs × time-to-train ÷ 3600</source>
        <translation>GPU 小时 = GPU 数 × 训练时长（秒）÷ 3600</translation>
    </message>
    <message>
        <source>cost = GPU-hours × price per GPU-hour</source>
        <translation>成本 = GPU 小时 × 每 GPU 小时单价</translation>
    </message>
    <message>
        <source>quantity</source>
        <translation>项目</translation>
    </message>
    <message>
        <source>value</source>
        <translation>数值</translation>
    </message>
    <message>
        <source>Select a plan in the table.</source>
        <translation>请在表格中选择一个方案。</translation>
    </message>
    <message>
        <source>Layout #{rank}</source>
        <translation>并行布局 #{rank}</translation>
    </message>
    <message>
        <source>stack</source>
        <translation>技术栈</translation>
    </message>
    <message>
        <source>GPUs</source>
        <translation>GPU 数</translation>
    </message>
    <message>
        <source>{gpus} = {nodes} node(s) × {per_node}</source>
        <translation>{gpus} = {nodes} 个节点 × {per_node}</translation>
    </message>
    <message>
        <source>GPUs = TP × PP × CP × DP</source>
        <translation>GPU 数 = TP × PP × CP × DP</translation>
    </message>
    <message>
        <source>TP / PP / CP / DP</source>
        <translation>TP / PP / CP / DP</translation>
    </message>
    <message>
        <source>tensor / pipeline (× virtual) / context / data parallel sizes</source>
        <translation>张量 / 流水线（× 虚拟阶段数）/ 上下文 / 数据并行度</translation>
    </message>
    <message>
        <source>micro-batch × accumulation × DP</source>
        <translation>微批次 × 累积步数 × DP</translation>
    </message>
    <message>
        <source>global batch = micro-batch × accumulation × data-parallel size</source>
        <translation>全局批大小 = 微批次大小 × 梯度累积步数 × 数据并行度</translation>
    </message>
    <message>
        <source>ZeRO stage</source>
        <translation>ZeRO 阶段</translation>
    </message>
    <message>
        <source>recompute</source>
        <translation>重计算</translation>
    </message>
    <message>
        <source>sequence parallel</source>
        <translation>序列并行</translation>
    </message>
    <message>
        <source>yes</source>
        <translation>是</translation>
    </message>
    <message>
        <source>no</source>
        <translation>否</translation>
    </message>
    <message>
        <source>fine-tuning</source>
        <translation>微调方式</translation>
    </message>
    <message>
        <source>{kind} r={rank} on {targets}: {params:.1f}M trainable ({share:.2%})</source>
        <translation>{kind} r={rank}，作用于 {targets}：可训练参数 {params:.1f}M（{share:.2%}）</translation>
    </message>
    <message>
        <source>adapters train on a frozen base (4-bit NF4 for QLoRA); data parallel only, as PEFT runs</source>
        <translation>在冻结的基座上训练适配器（QLoRA 的基座为 4 位 NF4）；与 PEFT 一样仅用数据并行</translation>
    </message>
    <message>
        <source>Memory per GPU (peak at {phase})</source>
        <translation>单卡显存（峰值出现在：{phase}）</translation>
    </message>
    <message>
        <source>tensor peak</source>
        <translation>张量峰值</translation>
    </message>
    <message>
        <source>the largest phase total of live tensors ≈ torch.cuda.max_memory_allocated()</source>
        <translation>各阶段存活张量总量的最大值 ≈ torch.cuda.max_memory_allocated()</translation>
    </message>
    <message>
        <source>total</source>
        <translation>合计</translation>
    </message>
    <message>
        <source>tensor peak + CUDA context + workspaces + allocator reserve ≈ nvidia-smi</source>
        <translation>张量峰值 + CUDA 上下文 + 工作区 + 分配器预留 ≈ nvidia-smi 读数</translation>
    </message>
    <message>
        <source>usable</source>
        <translation>可用</translation>
    </message>
    <message>
        <source>capacity × (1 − margin {margin:.0%})</source>
        <translation>容量 × (1 − 预留 {margin:.0%})</translation>
    </message>
    <message>
        <source>headroom</source>
        <translation>余量</translation>
    </message>
    <message>
        <source>usable − total</source>
        <translation>可用 − 合计</translation>
    </message>
    <message>
        <source>phase: {p}</source>
        <translation>阶段：{p}</translation>
    </message>
    <message>
        <source>total of live tensors at this moment of a step</source>
        <translation>训练步中这一时刻存活张量的总量</translation>
    </message>
    <message>
        <source>Time and cost</source>
        <translation>时间与成本</translation>
    </message>
    <message>
        <source>step time</source>
        <translation>单步耗时</translation>
    </message>
    <message>
        <source>of which QLoRA dequantization</source>
        <translation>其中 QLoRA 反量化</translation>
    </message>
    <message>
        <source>bitsandbytes turns each 4-bit weight back into 16 bits before every matmul that uses it</source>
        <translation>bitsandbytes 在每次用到某个 4 位权重的矩阵乘法之前，先把它还原为 16 位</translation>
    </message>
    <message>
        <source>throughput</source>
        <translation>吞吐量</translation>
    </message>
    <message>
        <source>MFU</source>
        <translation>MFU</translation>
    </message>
    <message>
        <source>HFU</source>
        <translation>HFU</translation>
    </message>
    <message>
        <source>GEMM efficiency</source>
        <translation>GEMM 效率</translation>
    </message>
    <message>
        <source>steps</source>
        <translation>步数</translation>
    </message>
    <message>
        <source>time-to-train</source>
        <translation>训练时长</translation>
    </message>
    <message>
        <source>{days:,.2f} days</source>
        <translation>{days:,.2f} 天</translation>
    </message>
    <message>
        <source>GPU-hours</source>
        <translation>GPU 小时</translation>
    </message>
    <message>
        <source>cost</source>
        <translation>成本</translation>
    </message>
    <message>
        <source>${cost:,.0f} at ${price:.2f}/GPU-hour</source>
        <translation>${cost:,.0f}（${price:.2f}/GPU 小时）</translation>
    </message>
    <message>
        <source>Batch and learning-rate guidance</source>
        <translation>批大小与学习率建议</translation>
    </message>
    <message>
        <source>global batch</source>
        <translation>全局批大小</translation>
    </message>
    <message>
        <source>{seqs:,} seq = {tokens:,.2f}M tokens</source>
        <translation>{seqs:,} 条序列 = {tokens:,.2f}M token</translation>
    </message>
    <message>
        <source>critical batch</source>
        <translation>临界批大小</translation>
    </message>
    <message>
        <source>{tokens:,.2f}M tokens</source>
        <translation>{tokens:,.2f}M token</translation>
    </message>
    <message>
        <source>B_crit ≈ B_noise (McCandlish et al. 2018): {src}</source>
        <translation>B_crit ≈ B_noise（McCandlish et al. 2018）：{src}</translation>
    </message>
    <message>
        <source>steps vs minimum</source>
        <translation>步数 / 最少步数</translation>
    </message>
    <message>
        <source>S(B)/S_min = 1 + B_noise/B</source>
        <translation>S(B)/S_min = 1 + B_noise/B</translation>
    </message>
    <message>
        <source>data vs minimum</source>
        <translation>数据量 / 最少数据量</translation>
    </message>
    <message>
        <source>E(B)/E_min = 1 + B/B_noise</source>
        <translation>E(B)/E_min = 1 + B/B_noise</translation>
    </message>
    <message>
        <source>learning rate</source>
        <translation>学习率</translation>
    </message>
    <message>
        <source>{rule}; linear {lin:.3g}, square-root {sq:.3g}</source>
        <translation>{rule}；线性规则 {lin:.3g}，平方根规则 {sq:.3g}</translation>
    </message>
    <message>
        <source>learning rate (DeepSeek law)</source>
        <translation>学习率（DeepSeek 定律）</translation>
    </message>
    <message>
        <source>eta_opt = 0.3118 · C^-0.125 (DeepSeek LLM 2024)</source>
        <translation>eta_opt = 0.3118 · C^-0.125（DeepSeek LLM 2024）</translation>
    </message>
    <message>
        <source>warmup</source>
        <translation>学习率预热</translation>
    </message>
    <message>
        <source>{steps:,} steps</source>
        <translation>{steps:,} 步</translation>
    </message>
    <message>
        <source>note</source>
        <translation>说明</translation>
    </message>
    <message>
        <source>Warnings</source>
        <translation>警告</translation>
    </message>
</context>
<context>
    <name>EmptyState</name>
    <message>
        <source>Nearest changes that give a plan:</source>
        <translation>最接近的可行改动：</translation>
    </message>
    <message>
        <source>No single change checked here gives a plan: try a smaller model, a shorter sequence, or a GPU with more memory.</source>
        <translation>这里检查过的单项改动都无法得到可行方案：请尝试更小的模型、更短的序列，或显存更大的 GPU。</translation>
    </message>
</context>
<context>
    <name>ExportDialog</name>
    <message>
        <source>Export plan #{rank} to a launcher</source>
        <translation>将方案 #{rank} 导出为启动器配置</translation>
    </message>
    <message>
        <source>no plan</source>
        <translation>没有方案</translation>
    </message>
    <message>
        <source>Not exported: {e}</source>
        <translation>未导出：{e}</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
    <message>
        <source>Save…</source>
        <translation>保存…</translation>
    </message>
    <message>
        <source>Copied {n} lines to the clipboard</source>
        <translation>已复制 {n} 行到剪贴板</translation>
    </message>
    <message>
        <source>Save</source>
        <translation>保存</translation>
    </message>
    <message>
        <source>Cannot save</source>
        <translation>无法保存</translation>
    </message>
    <message>
        <source>Saved {path}</source>
        <translation>已保存 {path}</translation>
    </message>
</context>
<context>
    <name>ExportHints</name>
    <message>
        <source>use the {names} tab</source>
        <translation>改用 {names} 标签页</translation>
    </message>
    <message>
        <source>select a plan whose TP/PP/CP are 1/1/1 (type &quot;1/1/1/&quot; in the table filter)</source>
        <translation>选择 TP/PP/CP 为 1/1/1 的方案（在表格筛选框中输入“1/1/1/”）</translation>
    </message>
    <message>
        <source>untick ZeRO stages 2 and 3 under Options</source>
        <translation>在“选项”中取消勾选 ZeRO 阶段 2 和 3</translation>
    </message>
    <message>
        <source>untick ZeRO stage 1 under Options</source>
        <translation>在“选项”中取消勾选 ZeRO 阶段 1</translation>
    </message>
    <message>
        <source>choose precision {value} under Options</source>
        <translation>在“选项”中将精度设为 {value}</translation>
    </message>
    <message>
        <source>choose optimizer {value} under Options</source>
        <translation>在“选项”中将优化器设为 {value}</translation>
    </message>
    <message>
        <source>choose stack {value} under Options</source>
        <translation>在“选项”中将技术栈设为 {value}</translation>
    </message>
    <message>
        <source> or </source>
        <translation>，或</translation>
    </message>
    <message>
        <source>To export it: {hint}.</source>
        <translation>如需导出：{hint}。</translation>
    </message>
</context>
<context>
    <name>FieldCheck</name>
    <message>
        <source>“{text}” is not a number</source>
        <translation>“{text}” 不是数字</translation>
    </message>
    <message>
        <source>“{text}” is not a whole number</source>
        <translation>“{text}” 不是整数</translation>
    </message>
    <message>
        <source>{text} is too small</source>
        <translation>{text} 太小</translation>
    </message>
    <message>
        <source>{text} is too large</source>
        <translation>{text} 太大</translation>
    </message>
    <message>
        <source>“{text}” needs a unit: tok or seq</source>
        <translation>“{text}” 需要单位：tok 或 seq</translation>
    </message>
    <message>
        <source>empty: type a number</source>
        <translation>为空：请输入数字</translation>
    </message>
    <message>
        <source>allowed: above {low} up to {high}</source>
        <translation>允许：大于 {low}，至多 {high}</translation>
    </message>
    <message>
        <source>allowed: whole numbers {low} to {high}</source>
        <translation>允许：{low} 到 {high} 的整数</translation>
    </message>
    <message>
        <source>allowed: {low} to {high}</source>
        <translation>允许：{low} 到 {high}</translation>
    </message>
</context>
<context>
    <name>GpuPanel</name>
    <message>
        <source>no GPU found</source>
        <translation>未找到 GPU</translation>
    </message>
    <message>
        <source>no NVIDIA driver</source>
        <translation>没有 NVIDIA 驱动</translation>
    </message>
    <message>
        <source>some GPUs were lost</source>
        <translation>部分 GPU 已丢失</translation>
    </message>
    <message>
        <source>the NVML Python bindings are missing</source>
        <translation>缺少 NVML 的 Python 绑定</translation>
    </message>
    <message>
        <source>the driver library and kernel module do not match</source>
        <translation>驱动库与内核模块版本不一致</translation>
    </message>
    <message>
        <source>NVML failed</source>
        <translation>NVML 出错</translation>
    </message>
    <message>
        <source>Reading the local GPUs…</source>
        <translation>正在读取本机 GPU…</translation>
    </message>
    <message>
        <source>Plan with a catalog GPU instead</source>
        <translation>改用硬件目录中的 GPU 进行规划</translation>
    </message>
    <message>
        <source>Plan for these GPUs</source>
        <translation>按这些 GPU 进行规划</translation>
    </message>
    <message>
        <source>not readable</source>
        <translation>无法读取</translation>
    </message>
    <message>
        <source>No NVIDIA GPU here ({status}): {message}</source>
        <translation>本机没有可用的 NVIDIA GPU（{status}）：{message}</translation>
    </message>
    <message>
        <source> · driver {version}</source>
        <translation> · 驱动 {version}</translation>
    </message>
    <message>
        <source>{n} GPU(s){driver}{cuda}</source>
        <translation>{n} 块 GPU{driver}{cuda}</translation>
    </message>
    <message>
        <source>lost</source>
        <translation>已丢失</translation>
    </message>
    <message>
        <source>not answering</source>
        <translation>无响应</translation>
    </message>
    <message>
        <source>memory unknown</source>
        <translation>显存未知</translation>
    </message>
</context>
<context>
    <name>InputPanel</name>
    <message>
        <source>A preset (type to search: llama-3.1-8b, qwen2.5-7b...), a size such as 7B (a Llama-style shape), or a Hugging Face config.json (Browse, or drop it on the window).</source>
        <translation>预设模型（输入即可搜索：llama-3.1-8b、qwen2.5-7b…）、参数规模如 7B（按 Llama 结构推算），或 Hugging Face 的 config.json（点击浏览，或直接拖到窗口上）。</translation>
    </message>
    <message>
        <source>Tokens per training sequence.</source>
        <translation>每条训练序列的 token 数。</translation>
    </message>
    <message>
        <source>How much data the run sees: a token budget (e.g. 1T) or a data set of N sequences × epochs. Sets the number of steps and so time-to-train.</source>
        <translation>训练要处理的数据量：token 预算（如 1T），或 N 条序列的数据集 × epoch 数。它决定训练步数，进而决定训练时长。</translation>
    </message>
    <message>
        <source>The accelerator: this machine&apos;s GPUs first (when NVML finds them), then the catalog (memory, peak FLOP/s, bandwidths, price).</source>
        <translation>加速卡：先列出本机 GPU（NVML 能检测到时），再列出硬件目录中的型号（显存、峰值 FLOP/s、带宽、价格）。</translation>
    </message>
    <message>
        <source>Nodes available; the plan may use fewer.</source>
        <translation>可用的节点数；方案可能用不满。</translation>
    </message>
    <message>
        <source>GPUs in each node; tensor parallelism stays inside a node.</source>
        <translation>每个节点的 GPU 数；张量并行只在节点内进行。</translation>
    </message>
    <message>
        <source>Network between nodes (InfiniBand, RoCE, EFA...). Default: by GPU family (NDR for Hopper).</source>
        <translation>节点间网络（InfiniBand、RoCE、EFA…）。默认按 GPU 系列选择（Hopper 为 NDR）。</translation>
    </message>
    <message>
        <source>Precision recipe: amp-bf16 = fp32 master weights with bf16 autocast; bf16-mixed keeps bf16 weights with an fp32 master copy; fp8 ...</source>
        <translation>精度方案：amp-bf16 = fp32 主权重 + bf16 autocast；bf16-mixed 使用 bf16 权重并保留一份 fp32 主权重；fp8 …</translation>
    </message>
    <message>
        <source>Optimizer: its states per parameter (AdamW 2 × fp32, 8-bit AdamW 2 × 1 byte, SGD-momentum 1, Adafactor factored).</source>
        <translation>优化器：决定每个参数的状态量（AdamW 为 2 × fp32，8-bit AdamW 为 2 × 1 字节，SGD-momentum 为 1 份，Adafactor 为分解形式）。</translation>
    </message>
    <message>
        <source>Loss implementation: the stack&apos;s own; HF cross-entropy (fp32 copy of the logits: Hugging Face stacks, torchtitan); chunked (Liger&apos;s fused linear cross-entropy, no full logits: Hugging Face stacks, on the model types Liger patches); Megatron&apos;s vocab-parallel (Megatron, DeepSpeed pipeline). Only the stacks that run it are searched; the export switches it on.</source>
        <translation>损失实现：所选技术栈自带的；HF 交叉熵（logits 的 fp32 副本：Hugging Face 技术栈、torchtitan）；分块（Liger 的融合线性交叉熵，不生成完整 logits：Hugging Face 技术栈，且仅限 Liger 支持的模型类型）；Megatron 的词表并行（Megatron、DeepSpeed 流水线）。只搜索能运行它的技术栈；导出时会开启它。</translation>
    </message>
    <message>
        <source>ZeRO stages to try: 0 plain data parallel; 1 shards optimizer states; 2 also gradients; 3 (FSDP) also weights.</source>
        <translation>要尝试的 ZeRO 阶段：0 为普通数据并行；1 切分优化器状态；2 再切分梯度；3（FSDP）再切分权重。</translation>
    </message>
    <message>
        <source>GPU memory kept free for fragmentation spikes and what the model misses.</source>
        <translation>预留不用的显存，用于应对内存碎片造成的峰值以及模型未估计到的部分。</translation>
    </message>
    <message>
        <source>USD per GPU-hour; blank for the catalog&apos;s indicative price.</source>
        <translation>每 GPU 小时的价格（美元）；留空则使用硬件目录中的参考价。</translation>
    </message>
    <message>
        <source>A learning rate known to work at the base batch (for LR scaling rules).</source>
        <translation>在基准批大小下验证可用的学习率（用于学习率缩放规则）。</translation>
    </message>
    <message>
        <source>The global batch (sequences) the base LR was tuned at.</source>
        <translation>调出基准学习率时所用的全局批大小（序列数）。</translation>
    </message>
    <message>
        <source>Measured gradient noise scale B_noise in tokens (≈ the critical batch, McCandlish et al. 2018); blank: the DeepSeek scaling law stands in.</source>
        <translation>实测的梯度噪声尺度 B_noise，单位为 token（≈ 临界批大小，McCandlish et al. 2018）；留空则用 DeepSeek 缩放定律代替。</translation>
    </message>
    <message>
        <source> ({active:.2f} B active)</source>
        <translation>（激活 {active:.2f} B）</translation>
    </message>
    <message>
        <source>{name}: {params:,.2f} B parameters{extra} · {layers} layers · hidden {hidden} · {heads} heads</source>
        <translation>{name}：{params:,.2f} B 参数{extra} · {layers} 层 · 隐藏维度 {hidden} · {heads} 个注意力头</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>preset, size (7B) or config.json</source>
        <translation>预设、规模（7B）或 config.json</translation>
    </message>
    <message>
        <source>Open a Hugging Face config.json</source>
        <translation>打开 Hugging Face config.json</translation>
    </message>
    <message>
        <source>model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>sequence length</source>
        <translation>序列长度</translation>
    </message>
    <message>
        <source>Batch and training length</source>
        <translation>批大小与训练量</translation>
    </message>
    <message>
        <source>tokens</source>
        <translation>token 数</translation>
    </message>
    <message>
        <source>adapter rank</source>
        <translation>适配器秩</translation>
    </message>
    <message>
        <source>adapter targets</source>
        <translation>适配器作用层</translation>
    </message>
    <message>
        <source>global batch</source>
        <translation>全局批大小</translation>
    </message>
    <message>
        <source>The stacks&apos; own switches, off by default as in the stacks: torchtitan&apos;s per-block torch.compile (fuses the work between the GEMMs) and async TP (hides the TP collectives behind the GEMMs; needs compile); Megatron&apos;s --overlap-grad-reduce (the gradient reduce-scatter behind the backward); DeepSpeed&apos;s partition activations (recomputed layers keep their input split over the TP ranks); torchtitan&apos;s zero-bubble pipeline schedule (weight gradients fill the bubble where a rank runs 2+ stages; not with compile); Megatron&apos;s --tp-comm-overlap (Transformer Engine hides part of the TP collectives behind the GEMMs; needs TP &gt; 1 with sequence parallelism) and --grad-reduce-in-bf16 (a bf16 gradient buffer: 2 bytes a parameter instead of 4). Float8 is the fp8 precision.</source>
        <translation>各技术栈自己的开关，与各栈一样默认关闭：torchtitan 的逐块 torch.compile（融合 GEMM 之间的运算）和异步 TP（把 TP 集合通信藏在 GEMM 后面；需要 compile）；Megatron 的 --overlap-grad-reduce（梯度 reduce-scatter 与反向传播重叠）；DeepSpeed 的 partition activations（重计算层的输入在各 TP rank 间切分保存）；torchtitan 的零气泡流水线调度（在每个 rank 运行 2 个及以上阶段时，用权重梯度填充流水线气泡；不能与 compile 同用）；Megatron 的 --tp-comm-overlap（Transformer Engine 把部分 TP 集合通信藏在 GEMM 后面；需要 TP &gt; 1 并开启序列并行）和 --grad-reduce-in-bf16（bf16 梯度缓冲区：每个参数 2 字节而不是 4 字节）。Float8 即 fp8 精度。</translation>
    </message>
    <message>
        <source>Target global batch per optimizer step = micro-batch × accumulation × data-parallel size. In sequences, or in tokens (must be a multiple of the sequence length); changing the unit converts the number. Suffixes as in the CLI: k, M, G (or B), T are powers of ten; Ki, Mi, Gi, Ti powers of two (4Mi = 4,194,304).</source>
        <translation>每个优化器步的目标全局批量 = 微批量 × 梯度累积 × 数据并行规模。以序列或 token 为单位（token 数须为序列长度的整数倍）；切换单位时数值随之换算。后缀与命令行相同：k、M、G（或 B）、T 为 10 的幂；Ki、Mi、Gi、Ti 为 2 的幂（4Mi = 4,194,304）。</translation>
    </message>
    <message>
        <source>The software that runs the job: its layouts, ZeRO stages, recompute, precision, kernels and launchers. &quot;any&quot; ranks every stack that can run the model.</source>
        <translation>运行训练任务的软件：其布局、ZeRO 阶段、重计算、精度、内核与启动器。“任意”会对所有能运行该模型的技术栈一起排序。</translation>
    </message>
    <message>
        <source>Full training updates every weight. LoRA trains small rank-r adapters on a frozen 16-bit base; QLoRA on a 4-bit NF4 base (bitsandbytes). Both run data parallel with ZeRO/FSDP, as PEFT does: no TP, PP or CP.</source>
        <translation>全量训练更新所有权重。LoRA 在冻结的 16 位基座上训练秩为 r 的小型适配器；QLoRA 的基座为 4 位 NF4（bitsandbytes）。两者都像 PEFT 一样以数据并行加 ZeRO/FSDP 运行：不使用 TP、PP 或 CP。</translation>
    </message>
    <message>
        <source>Adapter rank r (LoRA/QLoRA).</source>
        <translation>适配器的秩 r（LoRA/QLoRA）。</translation>
    </message>
    <message>
        <source>Training loop: accelerate and plain PyTorch loops keep the model output (b × s × vocabulary logits) through backward and the optimizer step; the Hugging Face Trainer and TRL free it inside compute_loss.</source>
        <translation>训练循环：accelerate 和普通 PyTorch 循环在反向传播和优化器步骤期间一直持有模型输出（b × s × 词表大小的 logits）；Hugging Face Trainer 和 TRL 在 compute_loss 内即释放它。</translation>
    </message>
    <message>
        <source>Projections that get an adapter: attention (q, k, v, o) or every linear layer (also gate, up, down).</source>
        <translation>加适配器的投影层：注意力层（q、k、v、o），或全部线性层（另加 gate、up、down）。</translation>
    </message>
    <message>
        <source>Activation recompute to try: none keeps every activation; selective recomputes attention; full recomputes whole layers (≈ +33 % compute); half recomputes every other layer.</source>
        <translation>要尝试的激活重计算模式：无 = 保留全部激活值；选择性 = 重算注意力部分；完全 = 重算整层（计算量约 +33 %）；一半 = 隔层重算。</translation>
    </message>
    <message>
        <source>sequences</source>
        <comment>unit</comment>
        <translation>条序列</translation>
    </message>
    <message>
        <source>tokens</source>
        <comment>unit</comment>
        <translation>token</translation>
    </message>
    <message>
        <source>token budget</source>
        <translation>token 预算</translation>
    </message>
    <message>
        <source>data set × epochs</source>
        <translation>数据集 × epoch 数</translation>
    </message>
    <message>
        <source>training length</source>
        <translation>训练量</translation>
    </message>
    <message>
        <source>sequences in data set</source>
        <translation>数据集序列数</translation>
    </message>
    <message>
        <source>epochs</source>
        <translation>epoch 数</translation>
    </message>
    <message>
        <source>Hardware</source>
        <translation>硬件</translation>
    </message>
    <message>
        <source>GPU</source>
        <translation>GPU</translation>
    </message>
    <message>
        <source>nodes</source>
        <translation>节点数</translation>
    </message>
    <message>
        <source>GPUs per node</source>
        <translation>每节点 GPU 数</translation>
    </message>
    <message>
        <source>default for the GPU family</source>
        <translation>按 GPU 系列默认</translation>
    </message>
    <message>
        <source>inter-node link</source>
        <translation>节点间互联</translation>
    </message>
    <message>
        <source>Options</source>
        <translation>选项</translation>
    </message>
    <message>
        <source>any stack</source>
        <translation>任意技术栈</translation>
    </message>
    <message>
        <source>stack</source>
        <translation>技术栈</translation>
    </message>
    <message>
        <source>the stack&apos;s own</source>
        <translation>技术栈自身的精度</translation>
    </message>
    <message>
        <source>precision</source>
        <translation>精度</translation>
    </message>
    <message>
        <source>torch.compile</source>
        <translation>torch.compile</translation>
    </message>
    <message>
        <source>async TP</source>
        <translation>异步 TP</translation>
    </message>
    <message>
        <source>overlap grad reduce</source>
        <translation>梯度归约重叠</translation>
    </message>
    <message>
        <source>partition activations</source>
        <translation>激活切分</translation>
    </message>
    <message>
        <source>zero bubble</source>
        <translation>零气泡流水线</translation>
    </message>
    <message>
        <source>TP comm overlap</source>
        <translation>TP 通信重叠</translation>
    </message>
    <message>
        <source>grad reduce in bf16</source>
        <translation>bf16 梯度归约</translation>
    </message>
    <message>
        <source>stack switches</source>
        <translation>技术栈开关</translation>
    </message>
    <message>
        <source>optimizer</source>
        <translation>优化器</translation>
    </message>
    <message>
        <source>accelerate / plain loop</source>
        <translation>accelerate / 普通循环</translation>
    </message>
    <message>
        <source>HF Trainer / TRL</source>
        <translation>HF Trainer / TRL</translation>
    </message>
    <message>
        <source>training loop</source>
        <translation>训练循环</translation>
    </message>
    <message>
        <source>framework&apos;s</source>
        <translation>框架默认</translation>
    </message>
    <message>
        <source>HF cross-entropy</source>
        <translation>HF 交叉熵</translation>
    </message>
    <message>
        <source>chunked (Liger)</source>
        <translation>分块（Liger）</translation>
    </message>
    <message>
        <source>vocab-parallel</source>
        <translation>词表并行</translation>
    </message>
    <message>
        <source>loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>full training</source>
        <translation>全量训练</translation>
    </message>
    <message>
        <source>LoRA</source>
        <translation>LoRA</translation>
    </message>
    <message>
        <source>QLoRA (4-bit base)</source>
        <translation>QLoRA（4 位基座）</translation>
    </message>
    <message>
        <source>fine-tuning</source>
        <translation>微调方式</translation>
    </message>
    <message>
        <source>attention</source>
        <translation>注意力层</translation>
    </message>
    <message>
        <source>all linear layers</source>
        <translation>全部线性层</translation>
    </message>
    <message>
        <source>ZeRO stages</source>
        <translation>ZeRO 阶段</translation>
    </message>
    <message>
        <source>recompute</source>
        <translation>重计算</translation>
    </message>
    <message>
        <source>memory margin (%)</source>
        <translation>显存余量（%）</translation>
    </message>
    <message>
        <source>price (USD/GPU-hour)</source>
        <translation>价格（美元/GPU 小时）</translation>
    </message>
    <message>
        <source>catalog price</source>
        <translation>目录参考价</translation>
    </message>
    <message>
        <source>base LR</source>
        <translation>基准学习率</translation>
    </message>
    <message>
        <source>base batch (sequences)</source>
        <translation>基准批大小（序列）</translation>
    </message>
    <message>
        <source>B_noise (tokens)</source>
        <translation>B_noise（token）</translation>
    </message>
    <message>
        <source>This machine: {n} × {name}</source>
        <translation>本机：{n} × {name}</translation>
    </message>
    <message>
        <source>{gpus:,} GPUs in all is too many (allowed: up to {most:,})</source>
        <translation>共 {gpus:,} 块 GPU 过多（允许：至多 {most:,}）</translation>
    </message>
    <message>
        <source>tick at least one ZeRO stage</source>
        <translation>请至少勾选一个 ZeRO 阶段</translation>
    </message>
    <message>
        <source>tick at least one recompute mode</source>
        <translation>请至少勾选一种重计算模式</translation>
    </message>
    <message>
        <source>give the base LR and the base batch together</source>
        <translation>基准学习率和基准批大小需要同时填写</translation>
    </message>
    <message>
        <source>beyond the model’s context of {context:,.0f} tokens: it needs a long-context recipe</source>
        <translation>超出模型 {context:,.0f} 个 token 的上下文长度：需要长上下文训练方案</translation>
    </message>
    <message>
        <source>{epochs:,g} epochs is far more than language models are trained for</source>
        <translation>{epochs:,g} 个轮次远多于语言模型通常的训练轮数</translation>
    </message>
    <message>
        <source>{tokens:.3g} tokens is over 100× the largest published budgets</source>
        <translation>{tokens:.3g} 个 token 超过已公开最大训练量的 100 倍</translation>
    </message>
    <message>
        <source>{tokens:.3g} tokens per step is over 10× the largest published batches</source>
        <translation>每步 {tokens:.3g} 个 token 超过已公开最大批量的 10 倍</translation>
    </message>
    <message>
        <source>{gpus:,.0f} GPUs is more than any cluster built so far</source>
        <translation>{gpus:,.0f} 块 GPU 超过迄今任何已建成的集群</translation>
    </message>
    <message>
        <source>= {n:,.6g} sequences of {s:,.0f}</source>
        <translation>= {n:,.6g} 条长度为 {s:,.0f} 的序列</translation>
    </message>
    <message>
        <source>: not whole; round batches nearby: {b}</source>
        <translation>：不是整数；附近的整齐批量：{b}</translation>
    </message>
    <message>
        <source>{n:,} sequences ({t:,} tokens)</source>
        <translation>{n:,} 个序列（{t:,} 个 token）</translation>
    </message>
    <message>
        <source>= {t:,.0f} tokens</source>
        <translation>= {t:,.0f} token</translation>
    </message>
    <message>
        <source>config.json (*.json);;All files (*)</source>
        <translation>config.json (*.json);;所有文件 (*)</translation>
    </message>
</context>
<context>
    <name>Language</name>
    <message>
        <source>System default</source>
        <translation>跟随系统</translation>
    </message>
</context>
<context>
    <name>MainWindow</name>
    <message>
        <source>batchfit plan (*.json);;All files (*)</source>
        <translation>batchfit 方案 (*.json);;所有文件 (*)</translation>
    </message>
    <message>
        <source>Inputs</source>
        <translation>输入</translation>
    </message>
    <message>
        <source>Local GPUs</source>
        <translation>本机 GPU</translation>
    </message>
    <message>
        <source>Selected plan</source>
        <translation>选中的方案</translation>
    </message>
    <message>
        <source>&amp;File</source>
        <translation>文件(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;New</source>
        <translation>新建(&amp;N)</translation>
    </message>
    <message>
        <source>&amp;Open plan…</source>
        <translation>打开方案(&amp;O)…</translation>
    </message>
    <message>
        <source>Open &amp;Recent</source>
        <translation>最近打开(&amp;R)</translation>
    </message>
    <message>
        <source>&amp;Save plan</source>
        <translation>保存方案(&amp;S)</translation>
    </message>
    <message>
        <source>Save plan &amp;as…</source>
        <translation>方案另存为(&amp;A)…</translation>
    </message>
    <message>
        <source>Export table as &amp;CSV…</source>
        <translation>将表格导出为 CSV(&amp;C)…</translation>
    </message>
    <message>
        <source>Export plan to a &amp;launcher…</source>
        <translation>将方案导出为启动器配置(&amp;L)…</translation>
    </message>
    <message>
        <source>torchrun, accelerate, DeepSpeed, Megatron, Slurm… for the selected plan</source>
        <translation>为选中的方案生成 torchrun、accelerate、DeepSpeed、Megatron、Slurm… 配置</translation>
    </message>
    <message>
        <source>&amp;Calibrate on this machine…</source>
        <translation>在本机上校准(&amp;C)…</translation>
    </message>
    <message>
        <source>Measure matmul and step efficiency in a separate torch process</source>
        <translation>在独立的 torch 进程中测量矩阵乘法和训练步的效率</translation>
    </message>
    <message>
        <source>Export &amp;plot</source>
        <translation>导出图表(&amp;P)</translation>
    </message>
    <message>
        <source>Memory</source>
        <translation>显存</translation>
    </message>
    <message>
        <source>Time vs GPUs</source>
        <translation>训练时长 vs GPU 数</translation>
    </message>
    <message>
        <source>Time vs global batch</source>
        <translation>训练时长 vs 全局批大小</translation>
    </message>
    <message>
        <source>Throughput and MFU vs micro-batch</source>
        <translation>吞吐量与 MFU vs 微批次</translation>
    </message>
    <message>
        <source>&amp;Quit</source>
        <translation>退出(&amp;Q)</translation>
    </message>
    <message>
        <source>&amp;View</source>
        <translation>视图(&amp;V)</translation>
    </message>
    <message>
        <source>&amp;Language</source>
        <translation>语言(&amp;L)</translation>
    </message>
    <message>
        <source>&amp;Help</source>
        <translation>帮助(&amp;H)</translation>
    </message>
    <message>
        <source>How batchfit &amp;estimates</source>
        <translation>batchfit 如何估算(&amp;E)</translation>
    </message>
    <message>
        <source>&amp;About batchfit</source>
        <translation>关于 batchfit(&amp;A)</translation>
    </message>
    <message>
        <source>The language changes when batchfit starts again.</source>
        <translation>语言将在 batchfit 重新启动后切换。</translation>
    </message>
    <message>
        <source>Fix the field marked red to update the plan.</source>
        <translation>请修正标红的字段以更新方案。</translation>
    </message>
    <message>
        <source>Recompute failed: {m}</source>
        <translation>重新计算失败：{m}</translation>
    </message>
    <message>
        <source>{fit:,} of {grid:,} layouts fit · searched in {t:.2f} s</source>
        <translation>{grid:,} 种布局中有 {fit:,} 种放得下 · 搜索耗时 {t:.2f} s</translation>
    </message>
    <message>
        <source>calibrated: {p}</source>
        <translation>已校准：{p}</translation>
    </message>
    <message>
        <source>No plan: {m}</source>
        <translation>没有可行方案：{m}</translation>
    </message>
    <message>
        <source>worked example</source>
        <translation>示例</translation>
    </message>
    <message>
        <source>Unsaved changes</source>
        <translation>未保存的更改</translation>
    </message>
    <message>
        <source>Save the changes to this plan first?</source>
        <translation>是否先保存对此方案的更改？</translation>
    </message>
    <message>
        <source>Open plan</source>
        <translation>打开方案</translation>
    </message>
    <message>
        <source>Cannot open</source>
        <translation>无法打开</translation>
    </message>
    <message>
        <source>Save plan as</source>
        <translation>方案另存为</translation>
    </message>
    <message>
        <source>Cannot save</source>
        <translation>无法保存</translation>
    </message>
    <message>
        <source>Fix the fields marked red first.</source>
        <translation>请先修正标红的字段。</translation>
    </message>
    <message>
        <source>no layout fits these inputs, so there is no plan to save (the inputs are kept for the next start)</source>
        <translation>在这些输入下没有放得下的布局，因此没有可保存的方案（输入会保留到下次启动）</translation>
    </message>
    <message>
        <source>Saved {path}</source>
        <translation>已保存 {path}</translation>
    </message>
    <message>
        <source>Export plot</source>
        <translation>导出图表</translation>
    </message>
    <message>
        <source>Cannot export</source>
        <translation>无法导出</translation>
    </message>
    <message>
        <source>Export table</source>
        <translation>导出表格</translation>
    </message>
    <message>
        <source>Exported {n:,} rows to {path}</source>
        <translation>已将 {n:,} 行导出到 {path}</translation>
    </message>
    <message>
        <source>Plans now use the calibration {path}</source>
        <translation>方案现在使用校准配置 {path}</translation>
    </message>
    <message>
        <source># How batchfit estimates

The documentation is at https://github.com/batchfit/batchfit/tree/main/docs.</source>
        <translation># batchfit 如何估算

文档见 https://github.com/batchfit/batchfit/tree/main/docs</translation>
    </message>
    <message>
        <source>How batchfit estimates</source>
        <translation>batchfit 如何估算</translation>
    </message>
    <message>
        <source>About batchfit</source>
        <translation>关于 batchfit</translation>
    </message>
    <message>
        <source>&lt;b&gt;batchfit {v}&lt;/b&gt;&lt;br&gt;Capacity planner for distributed LLM training: what fits, which layout reaches the batch fastest, what it costs.</source>
        <translation>&lt;b&gt;batchfit {v}&lt;/b&gt;&lt;br&gt;分布式大模型训练的容量规划工具：什么配置放得下、哪种并行布局能最快达到目标批大小、要花多少钱。</translation>
    </message>
</context>
<context>
    <name>MemoryPlot</name>
    <message>
        <source>Per-GPU memory at the peak</source>
        <translation>峰值时的单卡显存</translation>
    </message>
    <message>
        <source>memory</source>
        <translation>显存</translation>
    </message>
    <message>
        <source>no plan: the smallest peak is {value:.1f} GiB</source>
        <translation>没有可行方案：最小峰值为 {value:.1f} GiB</translation>
    </message>
    <message>
        <source>capacity {cap:.1f} GiB · usable {usable:.1f} GiB</source>
        <translation>容量 {cap:.1f} GiB · 可用 {usable:.1f} GiB</translation>
    </message>
    <message>
        <source>{n} smaller parts {value:.2f}</source>
        <translation>其余 {n} 项 {value:.2f}</translation>
    </message>
    <message>
        <source>{part}: {value:.2f} GiB (total {total:.2f} GiB)</source>
        <translation>{part}：{value:.2f} GiB（合计 {total:.2f} GiB）</translation>
    </message>
</context>
<context>
    <name>NoPlan</name>
    <message>
        <source>Nothing fits in GPU memory</source>
        <translation>GPU 显存放不下任何方案</translation>
    </message>
    <message>
        <source>No layout reaches this global batch exactly</source>
        <translation>没有布局能恰好达到这个全局批大小</translation>
    </message>
    <message>
        <source>global batch {n:,} sequences ({t:,} tokens)</source>
        <translation>全局批大小 {n:,} 条序列（{t:,} token）</translation>
    </message>
    <message>
        <source>{n:,} nodes ({g:,} GPUs)</source>
        <translation>{n:,} 个节点（{g:,} 个 GPU）</translation>
    </message>
    <message>
        <source>allow every ZeRO stage and recompute mode</source>
        <translation>允许所有 ZeRO 阶段和重计算模式</translation>
    </message>
    <message>
        <source>{name} ({m:.0f} GiB)</source>
        <translation>{name}（{m:.0f} GiB）</translation>
    </message>
</context>
<context>
    <name>ResultsView</name>
    <message>
        <source>rank by</source>
        <translation>排序依据</translation>
    </message>
    <message>
        <source>The order of the # column, as the command line&apos;s --sort</source>
        <translation># 列的顺序，与命令行的 --sort 相同</translation>
    </message>
    <message>
        <source>filter (e.g. &quot;selective&quot;, &quot;2/1/1&quot;)</source>
        <translation>筛选（如“选择性”、“2/1/1”）</translation>
    </message>
    <message>
        <source>min headroom</source>
        <translation>最小余量</translation>
    </message>
    <message>
        <source>Hide plans with less usable memory left at the peak</source>
        <translation>隐藏峰值时剩余可用显存低于此值的方案</translation>
    </message>
    <message>
        <source>Pareto front only</source>
        <translation>仅帕累托前沿</translation>
    </message>
    <message>
        <source>Only plans no other beats on both time-to-train and GPU-hours</source>
        <translation>只显示在训练时长和 GPU 小时上不会被其他方案同时超越的方案</translation>
    </message>
    <message>
        <source>hide near-duplicates</source>
        <translation>隐藏近似重复</translation>
    </message>
    <message>
        <source>One row per group of plans with the same GPUs, TP, PP, ZeRO stage and recompute whose step times are within 0.1 % (they only trade CP against micro-batch, or DP against accumulation); the # column keeps the full ranking, so hidden ranks are skipped</source>
        <translation>GPU 数、TP、PP、ZeRO 阶段和重计算相同且步时相差不到 0.1 % 的方案只显示一行（它们只是用 CP 换微批次，或用 DP 换梯度累积）；# 列保留完整排名，因此被隐藏的名次会跳过</translation>
    </message>
    <message>
        <source>showing {n:,} of {total:,}</source>
        <translation>显示 {n:,} / {total:,}</translation>
    </message>
    <message>
        <source>{n:,} near-duplicates hidden</source>
        <translation>已隐藏 {n:,} 个近似重复</translation>
    </message>
    <message>
        <source>{n:,} hidden by the filters</source>
        <translation>筛选隐藏了 {n:,} 个</translation>
    </message>
</context>
<context>
    <name>SeriesPlot</name>
    <message>
        <source>no plan to show</source>
        <translation>没有可显示的方案</translation>
    </message>
    <message>
        <source>{axis}  (dashed: {marker})</source>
        <translation>{axis}（虚线：{marker}）</translation>
    </message>
    <message>
        <source>{gpus:.0f} GPUs: {days:.2f} days</source>
        <translation>{gpus:.0f} 块 GPU：{days:.2f} 天</translation>
    </message>
    <message>
        <source>Best time-to-train vs GPUs</source>
        <translation>不同 GPU 数下的最短训练时长</translation>
    </message>
    <message>
        <source>GPUs</source>
        <translation>GPU 数</translation>
    </message>
    <message>
        <source>time-to-train (days)</source>
        <translation>训练时长（天）</translation>
    </message>
    <message>
        <source>{tokens:.3g}M tokens: {days:.2f} days</source>
        <translation>{tokens:.3g}M token：{days:.2f} 天</translation>
    </message>
    <message>
        <source>Best time-to-train vs global batch</source>
        <translation>不同全局批大小下的最短训练时长</translation>
    </message>
    <message>
        <source>global batch (tokens)</source>
        <translation>全局批大小（token）</translation>
    </message>
    <message>
        <source>micro {micro:.0f}: {tps:,.0f} tokens/s, {mfu:.1f}% MFU</source>
        <translation>微批次 {micro:.0f}：{tps:,.0f} tokens/s，MFU {mfu:.1f}%</translation>
    </message>
    <message>
        <source>does not fit: {need:,.1f} GiB of {usable:,.1f} GiB usable</source>
        <translation>显存不足：需要 {need:,.1f} GiB，可用 {usable:,.1f} GiB</translation>
    </message>
    <message>
        <source>Throughput and MFU vs micro-batch</source>
        <translation>吞吐量与 MFU 随微批次的变化</translation>
    </message>
    <message>
        <source>tokens/s</source>
        <translation>tokens/s</translation>
    </message>
    <message>
        <source>MFU (%)</source>
        <translation>MFU (%)</translation>
    </message>
    <message>
        <source>does not fit in memory</source>
        <translation>显存放不下</translation>
    </message>
    <message>
        <source>micro-batch</source>
        <translation>微批次</translation>
    </message>
</context>
</TS>
