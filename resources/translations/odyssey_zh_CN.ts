<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN" sourcelanguage="en">
<context>
    <name>CompareView</name>
    <message>
        <source>no config.yaml</source>
        <translation>没有 config.yaml</translation>
    </message>
</context>
<context>
    <name>DatasetScan</name>
    <message>
        <source>%1, %2 sample</source>
        <translation>%1，%2 条样本</translation>
    </message>
    <message>
        <source>%1, %2 samples</source>
        <translation>%1，%2 条样本</translation>
    </message>
    <message>
        <source>; %1 of %2 records malformed</source>
        <translation>；%2 条记录中有 %1 条格式错误</translation>
    </message>
    <message>
        <source> (first at line %1)</source>
        <translation>（首个在第 %1 行）</translation>
    </message>
</context>
<context>
    <name>DisplayState</name>
    <message>
        <source>unknown</source>
        <translation>未知</translation>
    </message>
    <message>
        <source>starting</source>
        <translation>启动中</translation>
    </message>
    <message>
        <source>running</source>
        <translation>运行中</translation>
    </message>
    <message>
        <source>stopping</source>
        <translation>停止中</translation>
    </message>
    <message>
        <source>completed</source>
        <translation>已完成</translation>
    </message>
    <message>
        <source>stopped</source>
        <translation>已停止</translation>
    </message>
    <message>
        <source>failed</source>
        <translation>失败</translation>
    </message>
    <message>
        <source>failed (stopped responding)</source>
        <translation>失败（无响应）</translation>
    </message>
</context>
<context>
    <name>GpuProbe</name>
    <message>
        <source>%1 could not be loaded (the NVIDIA driver is not installed): %2</source>
        <translation>无法加载 %1（未安装 NVIDIA 驱动）：%2</translation>
    </message>
    <message>
        <source>%1 could not be loaded (the NVIDIA driver is not installed)</source>
        <translation>无法加载 %1（未安装 NVIDIA 驱动）</translation>
    </message>
    <message>
        <source>%1 lacks NVML functions the window needs (%2)</source>
        <translation>%1 缺少窗口所需的 NVML 函数（%2）</translation>
    </message>
    <message>
        <source>NVML did not initialise: %1</source>
        <translation>NVML 初始化失败：%1</translation>
    </message>
    <message>
        <source>NVML could not count the GPUs: %1</source>
        <translation>NVML 无法统计 GPU 数量：%1</translation>
    </message>
    <message>
        <source>(not accessible: %1)</source>
        <translation>（无法访问：%1）</translation>
    </message>
</context>
<context>
    <name>Launch</name>
    <message>
        <source>cannot create %1</source>
        <translation>无法创建 %1</translation>
    </message>
    <message>
        <source>cannot write %1: %2</source>
        <translation>无法写入 %1：%2</translation>
    </message>
    <message>
        <source>cannot start %1: %2</source>
        <translation>无法启动 %1：%2</translation>
    </message>
</context>
<context>
    <name>QObject</name>
    <message>
        <source>Browse…</source>
        <translation>浏览…</translation>
    </message>
</context>
<context>
    <name>RunScanner</name>
    <message>
        <source>no heartbeat and no live process: the job stopped responding</source>
        <translation>没有心跳，也没有存活的进程：任务已无响应</translation>
    </message>
    <message>
        <source>Cannot list %1: %2</source>
        <translation>无法列出 %1：%2</translation>
    </message>
</context>
<context>
    <name>RunWatcher</name>
    <message>
        <source>The run directory %1 no longer exists (deleted, moved or unmounted); showing what was read before.</source>
        <translation>运行目录 %1 已不存在（被删除、移动或卸载）；显示此前读取的内容。</translation>
    </message>
    <message>
        <source>The run directory %1 is back.</source>
        <translation>运行目录 %1 已恢复。</translation>
    </message>
</context>
<context>
    <name>TokenPreview</name>
    <message>
        <source>a JSON array of %1 MiB is not previewed (it would be read whole); JSON Lines files are read from their first lines</source>
        <translation>不预览 %1 MiB 的 JSON 数组（需要整体读取）；JSON Lines 文件只读取开头几行</translation>
    </message>
    <message>
        <source>no temporary folder for the preview</source>
        <translation>没有可供预览使用的临时文件夹</translation>
    </message>
    <message>
        <source>cannot be written</source>
        <translation>无法写入</translation>
    </message>
    <message>
        <source>no model directory with tokenizer.json is chosen</source>
        <translation>未选择含 tokenizer.json 的模型目录</translation>
    </message>
    <message>
        <source>%1 has no tokenizer.json</source>
        <translation>%1 中没有 tokenizer.json</translation>
    </message>
    <message>
        <source>the tokenizer could not be loaded: %1</source>
        <translation>无法加载分词器：%1</translation>
    </message>
    <message>
        <source>chat template: %1</source>
        <translation>对话模板：%1</translation>
    </message>
</context>
<context>
    <name>odyssey</name>
    <message>
        <source>Save a PNG of every page to DIR and exit (of the presets given, else of the quickstart and the 7B Ulysses preset).</source>
        <translation>将每个页面保存为 PNG 到 DIR 后退出（使用给定的预设，否则使用 quickstart 和 7B Ulysses 预设）。</translation>
    </message>
    <message>
        <source>Keep settings in this INI file instead of the user&apos;s.</source>
        <translation>将设置保存在此 INI 文件中，而不是用户的设置中。</translation>
    </message>
    <message>
        <source>With --screenshot: train the quickstart with odyssey-train while its pages are taken.</source>
        <translation>与 --screenshot 一起使用：截图期间用 odyssey-train 训练 quickstart。</translation>
    </message>
    <message>
        <source>Use a dark palette (Fusion style) whatever the desktop&apos;s.</source>
        <translation>无论桌面主题如何，都使用深色配色（Fusion 风格）。</translation>
    </message>
    <message>
        <source>Show the window in LANG (en, zh_CN or system) for this run, whatever View → Language says.</source>
        <translation>本次运行以 LANG（en、zh_CN 或 system）显示窗口，忽略“视图 → 语言”中的选择。</translation>
    </message>
    <message>
        <source>Odyssey: configure, plan and launch long-context LLM fine-tuning.
Without a display, train with odyssey-train run PRESET (docs/cli.md).</source>
        <translation>Odyssey：配置、规划并启动长上下文大模型微调。
没有显示器时，请用 odyssey-train run PRESET 训练（docs/cli.md）。</translation>
    </message>
    <message>
        <source>A preset (.yaml) to open.</source>
        <translation>要打开的预设（.yaml）。</translation>
    </message>
    <message>
        <source>odyssey: no display (neither DISPLAY nor WAYLAND_DISPLAY is set). The window needs one: run it in a desktop session, under Xvfb (xvfb-run odyssey), or with QT_QPA_PLATFORM=offscreen for screenshots. To train without a window: odyssey-train run PRESET.</source>
        <translation>odyssey：没有显示器（DISPLAY 和 WAYLAND_DISPLAY 均未设置）。窗口需要显示器：请在桌面会话中运行，或在 Xvfb 下运行（xvfb-run odyssey），截图时可使用 QT_QPA_PLATFORM=offscreen。不用窗口训练：odyssey-train run PRESET。</translation>
    </message>
    <message>
        <source>Start training the preset given (else the embedded quickstart, not the last preset) as soon as its files are checked, and follow it on the Monitor.</source>
        <translation>文件检查通过后立即开始训练给定的预设（未给定时为内置的 quickstart，而不是上次的预设），并在监控页跟踪它。</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::AdvancedPage</name>
    <message>
        <source>Precision and devices</source>
        <translation>精度与设备</translation>
    </message>
    <message>
        <source>Model source</source>
        <translation>模型来源</translation>
    </message>
    <message>
        <source>GPUs on this machine</source>
        <translation>本机 GPU</translation>
    </message>
    <message>
        <source>Kernels and activations</source>
        <translation>算子与激活</translation>
    </message>
    <message>
        <source>Optimizer memory</source>
        <translation>优化器显存</translation>
    </message>
    <message>
        <source>Optimizer and schedule</source>
        <translation>优化器与学习率调度</translation>
    </message>
    <message>
        <source>Data handling</source>
        <translation>数据处理</translation>
    </message>
    <message>
        <source>Logging and checkpoints</source>
        <translation>日志与检查点</translation>
    </message>
    <message>
        <source>Sequence parallelism</source>
        <translation>序列并行</translation>
    </message>
    <message>
        <source>Enable Ulysses sequence parallelism</source>
        <translation>启用 Ulysses 序列并行</translation>
    </message>
    <message>
        <source>Split every sequence across several GPUs: DeepSpeed-Ulysses all-to-all over attention heads, ring attention for what the heads cannot split.

ms-swift: --sequence_parallel_size N</source>
        <translation>将每条序列切分到多张 GPU 上：DeepSpeed-Ulysses 按注意力头做 all-to-all，注意力头无法再切分的部分使用环形注意力（ring attention）。

ms-swift：--sequence_parallel_size N</translation>
    </message>
    <message>
        <source>Automatic: Ulysses = gcd(KV heads, size)</source>
        <translation>自动：Ulysses = gcd(KV 头数, 并行度)</translation>
    </message>
    <message>
        <source>Explicit Ulysses degree</source>
        <translation>指定 Ulysses 并行度</translation>
    </message>
    <message>
        <source>Ulysses × ring split</source>
        <translation>Ulysses × 环形切分</translation>
    </message>
    <message>
        <source>Per-GPU sequence length: &lt;b&gt;%1&lt;/b&gt; tokens (max_length %2 ÷ %3)</source>
        <translation>每张 GPU 的序列长度：&lt;b&gt;%1&lt;/b&gt; 个 token（max_length %2 ÷ %3）</translation>
    </message>
    <message>
        <source>explicit</source>
        <translation>手动指定</translation>
    </message>
    <message>
        <source>auto: gcd(%1 KV heads, %2) = %3</source>
        <translation>自动：gcd(%1 个 KV 头, %2) = %3</translation>
    </message>
    <message>
        <source>auto; the model&apos;s KV heads are unknown, so Ulysses = size until it is found</source>
        <translation>自动；模型的 KV 头数未知，在找到模型之前 Ulysses = 并行度</translation>
    </message>
    <message>
        <source>Split: Ulysses &lt;b&gt;%1&lt;/b&gt; × ring &lt;b&gt;%2&lt;/b&gt; (%3)</source>
        <translation>切分：Ulysses &lt;b&gt;%1&lt;/b&gt; × 环形 &lt;b&gt;%2&lt;/b&gt;（%3）</translation>
    </message>
    <message>
        <source>Packed sequences are padded to a multiple of %1.</source>
        <translation>打包后的序列填充到 %1 的倍数。</translation>
    </message>
    <message>
        <source>Mesh: %1 processes = %2 data-parallel × %3 sequence-parallel</source>
        <translation>进程网格：%1 个进程 = %2 路数据并行 × %3 路序列并行</translation>
    </message>
    <message>
        <source>Mesh: %1 processes cannot be split into groups of %2</source>
        <translation>进程网格：%1 个进程无法分成每组 %2 个</translation>
    </message>
    <message>
        <source>Base weights (QLoRA)</source>
        <translation>基座权重（QLoRA）</translation>
    </message>
    <message>
        <source>Mixture of experts</source>
        <translation>混合专家（MoE）</translation>
    </message>
    <message>
        <source>Choose a card…</source>
        <translation>选择显卡…</translation>
    </message>
    <message>
        <source>24 GiB (RTX 4090, RTX 3090)</source>
        <translation>24 GiB（RTX 4090、RTX 3090）</translation>
    </message>
    <message>
        <source>32 GiB (RTX 5090)</source>
        <translation>32 GiB（RTX 5090）</translation>
    </message>
    <message>
        <source>48 GiB (RTX 6000 Ada, A6000, L40S)</source>
        <translation>48 GiB（RTX 6000 Ada、A6000、L40S）</translation>
    </message>
    <message>
        <source>80 GiB (A100, H100 80 GB)</source>
        <translation>80 GiB（A100、H100 80 GB）</translation>
    </message>
    <message>
        <source>Sets the GPU memory budget to a card&apos;s memory: the planner then chooses checkpointing, recomputation and offload to fit it, and a run caps its allocator there, so a larger GPU trains as that card would.</source>
        <translation>将显存预算设为所选显卡的显存：内存规划器据此选择梯度检查点、重计算与卸载以适配该预算，训练时显存分配器也以此为上限，因此在更大的 GPU 上训练的表现与该显卡相同。</translation>
    </message>
    <message>
        <source>Card preset</source>
        <translation>显卡预设</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::ChartPanel</name>
    <message>
        <source>step</source>
        <translation>步</translation>
    </message>
    <message>
        <source>waiting for the first step…</source>
        <translation>等待第一步…</translation>
    </message>
    <message>
        <source> NaN/Inf</source>
        <translation> NaN/Inf</translation>
    </message>
    <message>
        <source>%1: %2 (step %3)</source>
        <translation>%1：%2（第 %3 步）</translation>
    </message>
    <message>
        <source>%1: %2 at step %3</source>
        <translation>%1：第 %3 步为 %2</translation>
    </message>
    <message>
        <source>step %1</source>
        <translation>第 %1 步</translation>
    </message>
    <message>
        <source>Reset view</source>
        <translation>重置视图</translation>
    </message>
    <message>
        <source>Logarithmic scale</source>
        <translation>对数坐标</translation>
    </message>
    <message>
        <source>Export %1</source>
        <translation>导出 %1</translation>
    </message>
    <message>
        <source>Export PNG…</source>
        <translation>导出 PNG…</translation>
    </message>
    <message>
        <source>PNG image (*.png)</source>
        <translation>PNG 图像 (*.png)</translation>
    </message>
    <message>
        <source>Export CSV…</source>
        <translation>导出 CSV…</translation>
    </message>
    <message>
        <source>CSV (*.csv)</source>
        <translation>CSV (*.csv)</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::ChatPage</name>
    <message>
        <source>no chat template</source>
        <translation>无对话模板</translation>
    </message>
    <message>
        <source>Ready: %1 (%2, %3, template %4)</source>
        <translation>就绪：%1（%2，%3，模板 %4）</translation>
    </message>
    <message>
        <source>Engine stopped.</source>
        <translation>引擎已停止。</translation>
    </message>
    <message>
        <source>Engine not running.</source>
        <translation>引擎未运行。</translation>
    </message>
    <message>
        <source>the engine ended during the answer</source>
        <translation>引擎在回答过程中退出</translation>
    </message>
    <message>
        <source>Restart the engine</source>
        <translation>重启引擎</translation>
    </message>
    <message>
        <source>Model:</source>
        <translation>模型：</translation>
    </message>
    <message>
        <source>a model directory or a hub id in the cache (the Train page&apos;s model by default)</source>
        <translation>模型目录或缓存中的 Hub ID（默认为训练页的模型）</translation>
    </message>
    <message>
        <source>Browse…</source>
        <translation>浏览…</translation>
    </message>
    <message>
        <source>Load</source>
        <translation>加载</translation>
    </message>
    <message>
        <source>Start the engine with this model (it also starts on the first message).</source>
        <translation>用此模型启动引擎（发送第一条消息时也会自动启动）。</translation>
    </message>
    <message>
        <source>Side by side</source>
        <translation>并排对比</translation>
    </message>
    <message>
        <source>Send each message to both panes: compare the base model with a checkpoint, or two checkpoints.</source>
        <translation>每条消息同时发往两个窗格：对比基座模型与某个检查点，或对比两个检查点。</translation>
    </message>
    <message>
        <source>Left:</source>
        <translation>左：</translation>
    </message>
    <message>
        <source>Right:</source>
        <translation>右：</translation>
    </message>
    <message>
        <source>A LoRA adapter (a directory with adapter_config.json)</source>
        <translation>LoRA 适配器（含 adapter_config.json 的目录）</translation>
    </message>
    <message>
        <source>System prompt:</source>
        <translation>系统提示词：</translation>
    </message>
    <message>
        <source>Max new tokens</source>
        <translation>最大新 token 数</translation>
    </message>
    <message>
        <source>0: greedy (the most likely token every time)</source>
        <translation>0：贪心解码（每次取概率最高的 token）</translation>
    </message>
    <message>
        <source>Temperature</source>
        <translation>温度</translation>
    </message>
    <message>
        <source>Top-p</source>
        <translation>Top-p 采样</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>Top-k</source>
        <translation>Top-k 采样</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>随机种子</translation>
    </message>
    <message>
        <source>Message (Ctrl+Enter sends)</source>
        <translation>消息（Ctrl+Enter 发送）</translation>
    </message>
    <message>
        <source>Send</source>
        <translation>发送</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>Regenerate</source>
        <translation>重新生成</translation>
    </message>
    <message>
        <source>Clear</source>
        <translation>清空</translation>
    </message>
    <message>
        <source>Save…</source>
        <translation>保存…</translation>
    </message>
    <message>
        <source>Save the conversations as JSON Lines in the messages format (one line per pane).</source>
        <translation>将对话保存为 messages 格式的 JSON Lines（每个窗格一行）。</translation>
    </message>
    <message>
        <source>A model directory</source>
        <translation>模型目录</translation>
    </message>
    <message>
        <source>Save the conversations</source>
        <translation>保存对话</translation>
    </message>
    <message>
        <source>JSON Lines (*.jsonl)</source>
        <translation>JSON Lines (*.jsonl)</translation>
    </message>
    <message>
        <source>Model changed: the engine restarts with the next message.</source>
        <translation>模型已更改：引擎将在下一条消息时重启。</translation>
    </message>
    <message>
        <source>Base model (no adapter)</source>
        <translation>基座模型（无适配器）</translation>
    </message>
    <message>
        <source>Other adapter…</source>
        <translation>其他适配器…</translation>
    </message>
    <message>
        <source>odyssey-train was not found (beside this program, in $ODYSSEY_TRAIN_BIN or on PATH).</source>
        <translation>未找到 odyssey-train（本程序旁、$ODYSSEY_TRAIN_BIN 或 PATH 中均没有）。</translation>
    </message>
    <message>
        <source>Choose a model first.</source>
        <translation>请先选择模型。</translation>
    </message>
    <message>
        <source>Loading %1…</source>
        <translation>正在加载 %1…</translation>
    </message>
    <message>
        <source>You</source>
        <translation>你</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Generating…</source>
        <translation>生成中…</translation>
    </message>
    <message>
        <source>%1 tokens, %2 tokens/s, first token after %3 s%4</source>
        <translation>%1 个 token，%2 token/秒，首个 token 用时 %3 秒%4</translation>
    </message>
    <message>
        <source> — stopped</source>
        <translation> —— 已停止</translation>
    </message>
    <message>
        <source> — cut at the token limit</source>
        <translation> —— 达到 token 上限被截断</translation>
    </message>
    <message>
        <source>No answer: %1</source>
        <translation>没有回答：%1</translation>
    </message>
    <message>
        <source>%1: cannot be written (%2)</source>
        <translation>%1：无法写入（%2）</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::CommandPreview</name>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
    <message>
        <source>&lt;b&gt;odyssey-train&lt;/b&gt;</source>
        <translation>&lt;b&gt;odyssey-train&lt;/b&gt;</translation>
    </message>
    <message>
        <source>The preset plus one --set per value changed in the window; runs the same job from a terminal.</source>
        <translation>预设加上窗口中每个改动值对应的一个 --set；在终端中运行同一个任务。</translation>
    </message>
    <message>
        <source>&lt;b&gt;ms-swift&lt;/b&gt; (swift sft)</source>
        <translation>&lt;b&gt;ms-swift&lt;/b&gt;（swift sft）</translation>
    </message>
    <message>
        <source>The equivalent ms-swift command, as &apos;odyssey-train export-swift&apos; prints it. Settings ms-swift cannot express are listed in a trailing comment.</source>
        <translation>等价的 ms-swift 命令，与 “odyssey-train export-swift” 的输出相同。ms-swift 无法表达的设置列在末尾的注释中。</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::CompareView</name>
    <message>
        <source>Select two or more runs in the list and press Compare.</source>
        <translation>在列表中选择两个或更多运行，然后点击“对比”。</translation>
    </message>
    <message>
        <source>Log scale</source>
        <translation>对数坐标</translation>
    </message>
    <message>
        <source>Only differing keys</source>
        <translation>只显示不同的键</translation>
    </message>
    <message>
        <source>step</source>
        <translation>步</translation>
    </message>
    <message>
        <source>loss (smoothed; faint: raw)</source>
        <translation>损失（平滑后；浅色：原始值）</translation>
    </message>
    <message numerus="yes">
        <source>Reading %n run(s)…</source>
        <translation>
            <numerusform>正在读取 %n 个运行…</numerusform>
        </translation>
    </message>
    <message>
        <source> eval</source>
        <translation> 评估</translation>
    </message>
    <message numerus="yes">
        <source>%1: %n non-finite loss step(s)</source>
        <translation>
            <numerusform>%1：%n 步损失为非有限值</numerusform>
        </translation>
    </message>
    <message>
        <source>%1: %2</source>
        <translation>%1：%2</translation>
    </message>
    <message numerus="yes">
        <source>%n run(s) compared.</source>
        <translation>
            <numerusform>已对比 %n 个运行。</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>odyssey::ui::ConfigDiffModel</name>
    <message>
        <source>Key</source>
        <translation>键</translation>
    </message>
    <message>
        <source>(unreadable config)</source>
        <translation>（配置无法读取）</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::ConfigForm</name>
    <message>
        <source>No model chosen.</source>
        <translation>未选择模型。</translation>
    </message>
    <message>
        <source>No directory with config.json at &quot;%1&quot; (relative paths resolve against %2), and no such id in the Hugging Face or ModelScope cache.</source>
        <translation>“%1” 处没有含 config.json 的目录（相对路径以 %2 为基准），Hugging Face 和 ModelScope 缓存中也没有这个 ID。</translation>
    </message>
    <message>
        <source>the current directory</source>
        <translation>当前目录</translation>
    </message>
    <message>
        <source>%1 The head checks and the memory plan need its config.json.</source>
        <translation>%1 注意力头检查和显存规划需要它的 config.json。</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::DatasetListModel</name>
    <message>
        <source>all</source>
        <translation>全部</translation>
    </message>
    <message>
        <source>Samples drawn from this file with the seed (path#N); empty = every sample.</source>
        <translation>按随机种子从该文件中抽取的样本数（path#N）；留空 = 全部样本。</translation>
    </message>
    <message>
        <source>not a valid entry: expected path or path#N</source>
        <translation>不是有效条目：应为 path 或 path#N</translation>
    </message>
    <message>
        <source>scanning…</source>
        <translation>扫描中…</translation>
    </message>
    <message>
        <source>File</source>
        <translation>文件</translation>
    </message>
    <message>
        <source>Use</source>
        <translation>使用</translation>
    </message>
    <message>
        <source>Format and samples</source>
        <translation>格式与样本数</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::DatasetPreview</name>
    <message>
        <source>The first samples of the file as the chat template renders them. Highlighted: the tokens the loss trains on (the assistant&apos;s answers and their end-of-turn tokens); the rest is context (label -100).</source>
        <translation>文件开头的样本经对话模板渲染后的样子。高亮部分是计算损失、参与训练的 token（助手的回答及其轮次结束 token）；其余部分是上下文（label -100）。</translation>
    </message>
    <message>
        <source>tokens per sample</source>
        <translation>每条样本的 token 数</translation>
    </message>
    <message>
        <source>samples</source>
        <translation>样本数</translation>
    </message>
    <message>
        <source>Token length of each sample, untruncated; the red line is max_length.</source>
        <translation>每条样本未截断时的 token 长度；红线为 max_length。</translation>
    </message>
    <message>
        <source>Add a training file to preview its samples and token lengths.</source>
        <translation>添加训练文件后即可预览其样本和 token 长度。</translation>
    </message>
    <message>
        <source>Row %1 is not a valid dataset entry (path or path#N).</source>
        <translation>第 %1 行不是有效的数据集条目（path 或 path#N）。</translation>
    </message>
    <message>
        <source>Looking for the model…</source>
        <translation>正在查找模型…</translation>
    </message>
    <message>
        <source>No preview: only the bundled shape of %1 is known on this machine, without its tokenizer. Choose the model&apos;s directory (with tokenizer.json) to see %2 through the chat template and its token lengths.</source>
        <translation>无法预览：本机只知道 %1 的内置结构，没有它的分词器。请选择模型目录（含 tokenizer.json），即可查看 %2 经对话模板渲染的结果及其 token 长度。</translation>
    </message>
    <message>
        <source>No preview: choose a model directory with tokenizer.json (Model, above) to see %1 through its chat template and its token lengths.</source>
        <translation>无法预览：请选择含 tokenizer.json 的模型目录（上方“模型”），即可查看 %1 经对话模板渲染的结果及其 token 长度。</translation>
    </message>
    <message>
        <source>Tokenizing the first %1 samples of %2 with the tokenizer of %3…</source>
        <translation>正在用 %3 的分词器对 %2 的前 %1 条样本分词…</translation>
    </message>
    <message>
        <source>No preview of %1: %2</source>
        <translation>无法预览 %1：%2</translation>
    </message>
    <message>
        <source>%1 through the &lt;b&gt;%2&lt;/b&gt; template; highlighted: the tokens the loss trains on.</source>
        <translation>%1 经 &lt;b&gt;%2&lt;/b&gt; 模板渲染；高亮：计算损失的 token。</translation>
    </message>
    <message>
        <source>%1 · %2 tokens, %3 trained</source>
        <translation>%1 · %2 个 token，其中 %3 个参与训练</translation>
    </message>
    <message>
        <source>No sample of this file has tokens to train on.</source>
        <translation>该文件中没有任何样本含有可训练的 token。</translation>
    </message>
    <message>
        <source>the first %1 samples of the file</source>
        <translation>文件的前 %1 条样本</translation>
    </message>
    <message>
        <source>every sample of the file</source>
        <translation>文件的全部样本</translation>
    </message>
    <message>
        <source>&lt;b&gt;%1&lt;/b&gt; samples (%2): median %3, 95th percentile %4, longest %5 tokens.</source>
        <translation>&lt;b&gt;%1&lt;/b&gt; 条样本（%2）：中位数 %3，95 分位数 %4，最长 %5 个 token。</translation>
    </message>
    <message>
        <source>%1 longer than max_length %2</source>
        <translation>%1 条超过 max_length %2</translation>
    </message>
    <message>
        <source>dropped from training (truncation_strategy delete)</source>
        <translation>不参与训练（truncation_strategy delete）</translation>
    </message>
    <message>
        <source>the run fails (truncation_strategy raise)</source>
        <translation>运行将失败（truncation_strategy raise）</translation>
    </message>
    <message>
        <source>cut to max_length (truncation_strategy %1)</source>
        <translation>截断到 max_length（truncation_strategy %1）</translation>
    </message>
    <message>
        <source> %1 malformed records skipped.</source>
        <translation> 跳过了 %1 条格式错误的记录。</translation>
    </message>
    <message>
        <source> %1 samples have nothing to train on.</source>
        <translation> %1 条样本没有可训练的内容。</translation>
    </message>
    <message>
        <source>max_length %1</source>
        <translation>max_length %1</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::EngineClient</name>
    <message>
        <source>The engine could not be started: %1</source>
        <translation>无法启动引擎：%1</translation>
    </message>
    <message>
        <source>The engine stopped unexpectedly (killed or crashed).</source>
        <translation>引擎意外停止（被终止或崩溃）。</translation>
    </message>
    <message>
        <source>The engine ended with exit code %1.</source>
        <translation>引擎已退出，退出码 %1。</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::EvaluatePage</name>
    <message>
        <source>the base model (the Train page&apos;s model by default)</source>
        <translation>基座模型（默认为训练页的模型）</translation>
    </message>
    <message>
        <source>Base model:</source>
        <translation>基座模型：</translation>
    </message>
    <message>
        <source>Run:</source>
        <translation>运行：</translation>
    </message>
    <message>
        <source>Loss and perplexity</source>
        <translation>损失与困惑度</translation>
    </message>
    <message>
        <source>Data file:</source>
        <translation>数据文件：</translation>
    </message>
    <message>
        <source>{&quot;text&quot;: ...} lines, or a chat dataset (messages, sharegpt, alpaca) scored on the answers through the run&apos;s template</source>
        <translation>每行一个 {&quot;text&quot;: ...}，或对话数据集（messages、sharegpt、alpaca），按运行的模板只计算回答部分</translation>
    </message>
    <message>
        <source>Score the base and every checkpoint</source>
        <translation>评估基座模型和每个检查点</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Step</source>
        <translation>步数</translation>
    </message>
    <message>
        <source>Loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>Perplexity</source>
        <translation>困惑度</translation>
    </message>
    <message>
        <source>Generate</source>
        <translation>生成</translation>
    </message>
    <message>
        <source>Prompts file:</source>
        <translation>提示文件：</translation>
    </message>
    <message>
        <source>JSON Lines: {&quot;prompt&quot;: ...} or {&quot;messages&quot;: [...]} (a last assistant turn is the reference)</source>
        <translation>JSON Lines：{&quot;prompt&quot;: ...} 或 {&quot;messages&quot;: [...]}（最后一个助手回复作为参考答案）</translation>
    </message>
    <message>
        <source>Max new tokens</source>
        <translation>最大新 token 数</translation>
    </message>
    <message>
        <source>With:</source>
        <translation>使用：</translation>
    </message>
    <message>
        <source>Prompt</source>
        <translation>提示</translation>
    </message>
    <message>
        <source>Reference</source>
        <translation>参考答案</translation>
    </message>
    <message>
        <source>Output</source>
        <translation>输出</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Base model (no adapter)</source>
        <translation>基座模型（无适配器）</translation>
    </message>
    <message>
        <source>odyssey-train could not be started: %1</source>
        <translation>无法启动 odyssey-train：%1</translation>
    </message>
    <message>
        <source>Choose the base model and a data file first.</source>
        <translation>请先选择基座模型和数据文件。</translation>
    </message>
    <message>
        <source>Base model</source>
        <translation>基座模型</translation>
    </message>
    <message>
        <source>Choose the base model and a prompts file first.</source>
        <translation>请先选择基座模型和提示文件。</translation>
    </message>
    <message>
        <source>Done.</source>
        <translation>完成。</translation>
    </message>
    <message>
        <source>odyssey-train was not found (beside this program, in $ODYSSEY_TRAIN_BIN or on PATH).</source>
        <translation>未找到 odyssey-train（本程序旁、$ODYSSEY_TRAIN_BIN 或 PATH 中均没有）。</translation>
    </message>
    <message>
        <source>Scoring with %1…</source>
        <translation>正在用 %1 评估…</translation>
    </message>
    <message>
        <source>Generating with %1…</source>
        <translation>正在用 %1 生成…</translation>
    </message>
    <message>
        <source>Cancelled.</source>
        <translation>已取消。</translation>
    </message>
    <message>
        <source>Scoring with %1 failed (exit code %2):</source>
        <translation>用 %1 评估失败（退出码 %2）：</translation>
    </message>
    <message>
        <source>Generating with %1 failed (exit code %2):</source>
        <translation>用 %1 生成失败（退出码 %2）：</translation>
    </message>
    <message>
        <source>step</source>
        <translation>步</translation>
    </message>
    <message>
        <source>loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>checkpoints</source>
        <translation>检查点</translation>
    </message>
    <message>
        <source>base model</source>
        <translation>基座模型</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::ExportPage</name>
    <message>
        <source>Checkpoint (LoRA adapter):</source>
        <translation>检查点（LoRA 适配器）：</translation>
    </message>
    <message>
        <source>the adapter&apos;s base_model_name_or_path</source>
        <translation>适配器的 base_model_name_or_path</translation>
    </message>
    <message>
        <source>Base model:</source>
        <translation>基座模型：</translation>
    </message>
    <message>
        <source>a new directory (default: the checkpoint&apos;s path + -merged)</source>
        <translation>新目录（默认：检查点路径加 -merged）</translation>
    </message>
    <message>
        <source>Browse…</source>
        <translation>浏览…</translation>
    </message>
    <message>
        <source>Output directory:</source>
        <translation>输出目录：</translation>
    </message>
    <message>
        <source>As the base model (auto)</source>
        <translation>与基座模型相同（auto）</translation>
    </message>
    <message>
        <source>Weights:</source>
        <translation>权重：</translation>
    </message>
    <message>
        <source>16-bit (or as chosen above)</source>
        <translation>16 位（或按上面所选）</translation>
    </message>
    <message>
        <source>4-bit NF4 (bitsandbytes)</source>
        <translation>4 位 NF4（bitsandbytes）</translation>
    </message>
    <message>
        <source>4-bit FP4 (bitsandbytes)</source>
        <translation>4 位 FP4（bitsandbytes）</translation>
    </message>
    <message>
        <source>Quantization:</source>
        <translation>量化：</translation>
    </message>
    <message>
        <source>Export merged model</source>
        <translation>导出合并后的模型</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Open in Chat</source>
        <translation>在对话页打开</translation>
    </message>
    <message>
        <source>The merged model&apos;s directory (must not exist)</source>
        <translation>合并模型的目录（不能已存在）</translation>
    </message>
    <message>
        <source>A LoRA adapter (a directory with adapter_config.json)</source>
        <translation>LoRA 适配器（含 adapter_config.json 的目录）</translation>
    </message>
    <message>
        <source>odyssey-train could not be started: %1</source>
        <translation>无法启动 odyssey-train：%1</translation>
    </message>
    <message>
        <source>Other adapter…</source>
        <translation>其他适配器…</translation>
    </message>
    <message>
        <source>Choose a checkpoint (a directory with adapter_config.json).</source>
        <translation>请选择检查点（含 adapter_config.json 的目录）。</translation>
    </message>
    <message>
        <source>odyssey-train was not found (beside this program, in $ODYSSEY_TRAIN_BIN or on PATH).</source>
        <translation>未找到 odyssey-train（本程序旁、$ODYSSEY_TRAIN_BIN 或 PATH 中均没有）。</translation>
    </message>
    <message>
        <source>Starting…</source>
        <translation>正在启动…</translation>
    </message>
    <message>
        <source>Written %1: %2 in %3 files.</source>
        <translation>已写入 %1：%2，共 %3 个文件。</translation>
    </message>
    <message>
        <source>Done.</source>
        <translation>完成。</translation>
    </message>
    <message>
        <source>Cancelled; nothing was written.</source>
        <translation>已取消；未写入任何内容。</translation>
    </message>
    <message>
        <source>The export failed (exit code %1):</source>
        <translation>导出失败（退出码 %1）：</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::FieldRow</name>
    <message>
        <source>Description</source>
        <translation>描述</translation>
    </message>
    <message>
        <source>Chat template</source>
        <translation>对话模板</translation>
    </message>
    <message>
        <source>System prompt</source>
        <translation>系统提示词</translation>
    </message>
    <message>
        <source>Compute dtype</source>
        <translation>计算精度</translation>
    </message>
    <message>
        <source>Hub revision</source>
        <translation>Hub 版本</translation>
    </message>
    <message>
        <source>Chat template file</source>
        <translation>对话模板文件</translation>
    </message>
    <message>
        <source>Validation files</source>
        <translation>验证集文件</translation>
    </message>
    <message>
        <source>Validation split</source>
        <translation>验证集划分比例</translation>
    </message>
    <message>
        <source>Max length (tokens)</source>
        <translation>最大长度（token）</translation>
    </message>
    <message>
        <source>Too-long samples</source>
        <translation>超长样本</translation>
    </message>
    <message>
        <source>Packing</source>
        <translation>序列打包</translation>
    </message>
    <message>
        <source>Padding-free</source>
        <translation>无填充（padding-free）</translation>
    </message>
    <message>
        <source>Tolerated bad samples</source>
        <translation>可容忍的坏样本比例</translation>
    </message>
    <message>
        <source>Tuner</source>
        <translation>微调方式</translation>
    </message>
    <message>
        <source>LoRA rank</source>
        <translation>LoRA 秩</translation>
    </message>
    <message>
        <source>LoRA alpha</source>
        <translation>LoRA alpha</translation>
    </message>
    <message>
        <source>LoRA dropout</source>
        <translation>LoRA dropout</translation>
    </message>
    <message>
        <source>rsLoRA</source>
        <translation>rsLoRA</translation>
    </message>
    <message>
        <source>LoRA targets</source>
        <translation>LoRA 目标模块</translation>
    </message>
    <message>
        <source>Learning rate</source>
        <translation>学习率</translation>
    </message>
    <message>
        <source>LR schedule</source>
        <translation>学习率调度</translation>
    </message>
    <message>
        <source>Warmup ratio</source>
        <translation>预热比例</translation>
    </message>
    <message>
        <source>Warmup steps</source>
        <translation>预热步数</translation>
    </message>
    <message>
        <source>Weight decay</source>
        <translation>权重衰减</translation>
    </message>
    <message>
        <source>Max grad norm</source>
        <translation>梯度裁剪范数</translation>
    </message>
    <message>
        <source>Adam beta1</source>
        <translation>Adam beta1</translation>
    </message>
    <message>
        <source>Adam beta2</source>
        <translation>Adam beta2</translation>
    </message>
    <message>
        <source>Adam epsilon</source>
        <translation>Adam epsilon</translation>
    </message>
    <message>
        <source>Epochs</source>
        <translation>训练轮数</translation>
    </message>
    <message>
        <source>Max steps</source>
        <translation>最大步数</translation>
    </message>
    <message>
        <source>Batch per GPU</source>
        <translation>每张 GPU 的批大小</translation>
    </message>
    <message>
        <source>Grad accumulation</source>
        <translation>梯度累积步数</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>随机种子</translation>
    </message>
    <message>
        <source>GaLore</source>
        <translation>GaLore</translation>
    </message>
    <message>
        <source>Q-GaLore (int4 projections)</source>
        <translation>Q-GaLore（int4 投影）</translation>
    </message>
    <message>
        <source>GaLore rank</source>
        <translation>GaLore 秩</translation>
    </message>
    <message>
        <source>Projection update gap</source>
        <translation>投影更新间隔</translation>
    </message>
    <message>
        <source>GaLore scale</source>
        <translation>GaLore 缩放</translation>
    </message>
    <message>
        <source>GaLore targets</source>
        <translation>GaLore 目标模块</translation>
    </message>
    <message>
        <source>ZeRO stage</source>
        <translation>ZeRO 阶段</translation>
    </message>
    <message>
        <source>Offload optimizer to CPU</source>
        <translation>优化器卸载到 CPU</translation>
    </message>
    <message>
        <source>Optimizer precision</source>
        <translation>优化器精度</translation>
    </message>
    <message>
        <source>Attention kernel</source>
        <translation>注意力算子</translation>
    </message>
    <message>
        <source>Fused kernels</source>
        <translation>融合算子</translation>
    </message>
    <message>
        <source>Activation checkpointing</source>
        <translation>梯度检查点</translation>
    </message>
    <message>
        <source>Offload activations to CPU</source>
        <translation>激活卸载到 CPU</translation>
    </message>
    <message>
        <source>Tiled MLP (tokens per tile)</source>
        <translation>分块 MLP（每块 token 数）</translation>
    </message>
    <message>
        <source>Keep attention outputs</source>
        <translation>保留注意力输出</translation>
    </message>
    <message>
        <source>Layers per stored checkpoint</source>
        <translation>每个存储检查点的层数</translation>
    </message>
    <message>
        <source>GPU memory budget (GiB)</source>
        <translation>显存预算（GiB）</translation>
    </message>
    <message>
        <source>Sequence-parallel size</source>
        <translation>序列并行度</translation>
    </message>
    <message>
        <source>Ulysses degree</source>
        <translation>Ulysses 并行度</translation>
    </message>
    <message>
        <source>Expert parallel degree</source>
        <translation>专家并行度</translation>
    </message>
    <message>
        <source>Expert LoRA parameters</source>
        <translation>专家 LoRA 参数</translation>
    </message>
    <message>
        <source>Router balance loss weight</source>
        <translation>路由负载均衡损失权重</translation>
    </message>
    <message>
        <source>Freeze routers</source>
        <translation>冻结路由器</translation>
    </message>
    <message>
        <source>Device</source>
        <translation>设备</translation>
    </message>
    <message>
        <source>GPU ids</source>
        <translation>GPU 编号</translation>
    </message>
    <message>
        <source>Processes per node</source>
        <translation>每节点进程数</translation>
    </message>
    <message>
        <source>Nodes</source>
        <translation>节点数</translation>
    </message>
    <message>
        <source>Log every</source>
        <translation>日志间隔（步）</translation>
    </message>
    <message>
        <source>Evaluate every</source>
        <translation>评估间隔（步）</translation>
    </message>
    <message>
        <source>Save every</source>
        <translation>保存间隔（步）</translation>
    </message>
    <message>
        <source>Checkpoints kept</source>
        <translation>保留的检查点数</translation>
    </message>
    <message>
        <source>Output folder</source>
        <translation>输出目录</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Training files</source>
        <translation>训练文件</translation>
    </message>
    <message>
        <source>Resume from checkpoint</source>
        <translation>断点续训</translation>
    </message>
    <message>
        <source>Preset key: %1</source>
        <translation>预设键：%1</translation>
    </message>
    <message>
        <source>ms-swift: no equivalent (Odyssey only)</source>
        <translation>ms-swift：无对应参数（仅 Odyssey）</translation>
    </message>
    <message>
        <source>ms-swift: %1</source>
        <translation>ms-swift：%1</translation>
    </message>
    <message>
        <source>Error: </source>
        <translation>错误：</translation>
    </message>
    <message>
        <source>Warning: </source>
        <translation>警告：</translation>
    </message>
    <message>
        <source>Base weight bits</source>
        <translation>基座权重位数</translation>
    </message>
    <message>
        <source>Quantization format</source>
        <translation>量化格式</translation>
    </message>
    <message>
        <source>4-bit type</source>
        <translation>4 位量化类型</translation>
    </message>
    <message>
        <source>Double quantization</source>
        <translation>双重量化</translation>
    </message>
    <message>
        <source>4-bit compute dtype</source>
        <translation>4 位计算精度</translation>
    </message>
    <message>
        <source>Start from adapter</source>
        <translation>从适配器继续训练</translation>
    </message>
    <message>
        <source>Report to</source>
        <translation>指标上报到</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::GpuListModel</name>
    <message>
        <source>device is cpu: no GPU is used (set device to auto or cuda to choose GPUs).</source>
        <translation>device 为 cpu：不使用 GPU（将 device 设为 auto 或 cuda 才能选择 GPU）。</translation>
    </message>
    <message>
        <source>Train on GPU %1 (gpu_ids). Every GPU checked = gpu_ids [] (all visible GPUs).</source>
        <translation>在 GPU %1 上训练（gpu_ids）。全部勾选 = gpu_ids []（所有可见 GPU）。</translation>
    </message>
    <message>
        <source>Memory in use / total, as NVML reports it.</source>
        <translation>已用 / 总显存，数据来自 NVML。</translation>
    </message>
    <message>
        <source>–</source>
        <translation>–</translation>
    </message>
    <message>
        <source>Share of the last sample period in which a kernel ran (NVML).</source>
        <translation>上一个采样周期内有算子运行的时间占比（NVML）。</translation>
    </message>
    <message>
        <source>Use</source>
        <translation>使用</translation>
    </message>
    <message>
        <source>GPU</source>
        <translation>GPU</translation>
    </message>
    <message>
        <source>Memory</source>
        <translation>显存</translation>
    </message>
    <message>
        <source>Utilisation</source>
        <translation>利用率</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::GpuPanel</name>
    <message>
        <source>Looking for NVIDIA GPUs…</source>
        <translation>正在查找 NVIDIA GPU…</translation>
    </message>
    <message>
        <source>GPUs are not probed.</source>
        <translation>未探测 GPU。</translation>
    </message>
    <message>
        <source>NVML lists no device</source>
        <translation>NVML 未列出任何设备</translation>
    </message>
    <message>
        <source>&lt;b&gt;No NVIDIA GPU found: training runs on the CPU.&lt;/b&gt; &lt;span style=&apos;font-size:small&apos;&gt;(%1)&lt;/span&gt;</source>
        <translation>&lt;b&gt;未找到 NVIDIA GPU：训练将在 CPU 上运行。&lt;/b&gt; &lt;span style=&apos;font-size:small&apos;&gt;（%1）&lt;/span&gt;</translation>
    </message>
    <message>
        <source>device is cuda: a run started here will fail; set device to auto or cpu.</source>
        <translation>device 为 cuda：在此启动的运行会失败；请将 device 设为 auto 或 cpu。</translation>
    </message>
    <message numerus="yes">
        <source>%n NVIDIA GPU(s); device is cpu, so none is used.</source>
        <translation>
            <numerusform>%n 张 NVIDIA GPU；device 为 cpu，因此不使用任何 GPU。</numerusform>
        </translation>
    </message>
    <message numerus="yes">
        <source>%n NVIDIA GPU(s); training uses every one (gpu_ids empty).</source>
        <translation>
            <numerusform>%n 张 NVIDIA GPU；训练使用全部 GPU（gpu_ids 为空）。</numerusform>
        </translation>
    </message>
    <message numerus="yes">
        <source>%n NVIDIA GPU(s); training uses the checked ones.</source>
        <translation>
            <numerusform>%n 张 NVIDIA GPU；训练使用勾选的 GPU。</numerusform>
        </translation>
    </message>
    <message>
        <source> Driver %1.</source>
        <translation> 驱动版本 %1。</translation>
    </message>
    <message>
        <source>gpu_ids lists %1, which this machine does not have.</source>
        <translation>gpu_ids 中列出的 %1 在本机上不存在。</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::JobController</name>
    <message>
        <source>&lt;b&gt;Not started:&lt;/b&gt; the job started from this window is still starting or running.</source>
        <translation>&lt;b&gt;未启动：&lt;/b&gt;从本窗口启动的任务仍在启动或运行中。</translation>
    </message>
    <message>
        <source>&lt;b&gt;Not started:&lt;/b&gt; %1</source>
        <translation>&lt;b&gt;未启动：&lt;/b&gt;%1</translation>
    </message>
    <message>
        <source>Starting &lt;tt&gt;odyssey-train run %1&lt;/tt&gt; … (output in %2)</source>
        <translation>正在启动 &lt;tt&gt;odyssey-train run %1&lt;/tt&gt; …（输出写入 %2）</translation>
    </message>
    <message>
        <source>Training in %1 (engine output: %2).</source>
        <translation>正在 %1 中训练（引擎输出：%2）。</translation>
    </message>
    <message>
        <source>&lt;b&gt;odyssey-train exited with status %1 before it started a run.&lt;/b&gt;</source>
        <translation>&lt;b&gt;odyssey-train 在开始运行之前退出，状态码 %1。&lt;/b&gt;</translation>
    </message>
    <message>
        <source>&lt;b&gt;odyssey-train printed no run directory in %1 s&lt;/b&gt;; it may still be checking the configuration.</source>
        <translation>&lt;b&gt;odyssey-train 在 %1 秒内没有输出运行目录&lt;/b&gt;；它可能仍在检查配置。</translation>
    </message>
    <message>
        <source> Last lines of &lt;a href=&apos;%1&apos;&gt;%2&lt;/a&gt; (click for the whole log):</source>
        <translation> &lt;a href=&apos;%1&apos;&gt;%2&lt;/a&gt; 的最后几行（点击查看完整日志）：</translation>
    </message>
    <message>
        <source>its process is gone</source>
        <translation>其进程已不存在</translation>
    </message>
    <message>
        <source>killed (SIGKILL), without a final checkpoint</source>
        <translation>已强制结束（SIGKILL），没有最终检查点</translation>
    </message>
    <message>
        <source>The run in %1 ended: %2.</source>
        <translation>%1 中的运行已结束：%2。</translation>
    </message>
    <message>
        <source>The attached run is not running any more.</source>
        <translation>关联的运行已不在运行。</translation>
    </message>
    <message>
        <source>&lt;b&gt;Not stopped:&lt;/b&gt; the job runs on host %1 (this is %2); stop it there.</source>
        <translation>&lt;b&gt;未停止：&lt;/b&gt;任务运行在主机 %1 上（本机是 %2）；请在那台主机上停止它。</translation>
    </message>
    <message>
        <source>&lt;b&gt;Kill failed:&lt;/b&gt; pid %1: %2</source>
        <translation>&lt;b&gt;强制结束失败：&lt;/b&gt;pid %1：%2</translation>
    </message>
    <message>
        <source>&lt;b&gt;Stop failed:&lt;/b&gt; pid %1: %2</source>
        <translation>&lt;b&gt;停止失败：&lt;/b&gt;pid %1：%2</translation>
    </message>
    <message>
        <source>Killed pid %1 (SIGKILL).</source>
        <translation>已强制结束 pid %1（SIGKILL）。</translation>
    </message>
    <message>
        <source>Asked pid %1 to stop (SIGTERM): it finishes the step, saves a checkpoint and exits. Click Kill… to end it at once.</source>
        <translation>已请求 pid %1 停止（SIGTERM）：它会完成当前步、保存检查点后退出。点击“强制结束…”可立即结束。</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::LogView</name>
    <message>
        <source>Filter (text, case-insensitive)</source>
        <translation>过滤（文本，不区分大小写）</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::MainWindow</name>
    <message>
        <source>&amp;Train</source>
        <translation>训练(&amp;T)</translation>
    </message>
    <message>
        <source>&amp;Advanced</source>
        <translation>高级(&amp;A)</translation>
    </message>
    <message>
        <source>&amp;Monitor</source>
        <translation>监控(&amp;M)</translation>
    </message>
    <message>
        <source>Start training</source>
        <translation>开始训练</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>No running job is attached to the Monitor.</source>
        <translation>监控页没有关联正在运行的任务。</translation>
    </message>
    <message>
        <source>Memory plan</source>
        <translation>显存规划</translation>
    </message>
    <message>
        <source>Commands</source>
        <translation>命令</translation>
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
        <source>&amp;File</source>
        <translation>文件(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;Open preset…</source>
        <translation>打开预设(&amp;O)…</translation>
    </message>
    <message>
        <source>&amp;Save preset</source>
        <translation>保存预设(&amp;S)</translation>
    </message>
    <message>
        <source>Save preset &amp;as…</source>
        <translation>预设另存为(&amp;A)…</translation>
    </message>
    <message>
        <source>&amp;Recent presets</source>
        <translation>最近的预设(&amp;R)</translation>
    </message>
    <message>
        <source>&amp;Bundled presets</source>
        <translation>内置预设(&amp;B)</translation>
    </message>
    <message>
        <source>(none found in %1)</source>
        <translation>（%1 中未找到）</translation>
    </message>
    <message>
        <source>&amp;Import swift command…</source>
        <translation>导入 swift 命令(&amp;I)…</translation>
    </message>
    <message>
        <source>&amp;Quit</source>
        <translation>退出(&amp;Q)</translation>
    </message>
    <message>
        <source>&amp;Help</source>
        <translation>帮助(&amp;H)</translation>
    </message>
    <message>
        <source>&amp;Documentation</source>
        <translation>文档(&amp;D)</translation>
    </message>
    <message>
        <source>&amp;About Odyssey</source>
        <translation>关于 Odyssey(&amp;A)</translation>
    </message>
    <message>
        <source>odyssey-train was not found (ODYSSEY_TRAIN_BIN names it).</source>
        <translation>未找到 odyssey-train（可用 ODYSSEY_TRAIN_BIN 指定）。</translation>
    </message>
    <message>
        <source>%1 env did not answer.</source>
        <translation>%1 env 没有响应。</translation>
    </message>
    <message>
        <source>&lt;h3&gt;Odyssey %1&lt;/h3&gt;&lt;p&gt;A workbench for long-context LLM fine-tuning: configure, plan, launch and monitor odyssey-train.&lt;/p&gt;&lt;p&gt;Qt %2 (built with %3)&lt;/p&gt;&lt;p&gt;&lt;b&gt;Engine&lt;/b&gt; (%4):&lt;br&gt;%5&lt;/p&gt;</source>
        <translation>&lt;h3&gt;Odyssey %1&lt;/h3&gt;&lt;p&gt;长上下文大模型微调工作台：配置、规划、启动并监控 odyssey-train。&lt;/p&gt;&lt;p&gt;Qt %2（编译时版本 %3）&lt;/p&gt;&lt;p&gt;&lt;b&gt;引擎&lt;/b&gt;（%4）：&lt;br&gt;%5&lt;/p&gt;</translation>
    </message>
    <message>
        <source>System default (%1)</source>
        <translation>跟随系统（%1）</translation>
    </message>
    <message>
        <source>Language</source>
        <translation>语言</translation>
    </message>
    <message>
        <source>Odyssey will be shown in %1 the next time it starts.</source>
        <translation>Odyssey 下次启动时将以 %1 显示。</translation>
    </message>
    <message>
        <source>About Odyssey</source>
        <translation>关于 Odyssey</translation>
    </message>
    <message>
        <source>The untitled configuration</source>
        <translation>未命名的配置</translation>
    </message>
    <message>
        <source>Unsaved changes</source>
        <translation>未保存的更改</translation>
    </message>
    <message>
        <source>%1 has changes that are not saved. Save them first?</source>
        <translation>%1 有尚未保存的更改。要先保存吗？</translation>
    </message>
    <message>
        <source>(none yet)</source>
        <translation>（暂无）</translation>
    </message>
    <message>
        <source>Dismiss</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>&lt;b&gt;%1 was not loaded&lt;/b&gt; — the form is unchanged:&lt;br&gt;</source>
        <translation>&lt;b&gt;未加载 %1&lt;/b&gt; —— 表单保持不变：&lt;br&gt;</translation>
    </message>
    <message>
        <source>&lt;b&gt;Loaded with warnings:&lt;/b&gt;&lt;br&gt;</source>
        <translation>&lt;b&gt;已加载，但有警告：&lt;/b&gt;&lt;br&gt;</translation>
    </message>
    <message>
        <source>Open preset</source>
        <translation>打开预设</translation>
    </message>
    <message>
        <source>Odyssey presets (*.yaml *.yml)</source>
        <translation>Odyssey 预设 (*.yaml *.yml)</translation>
    </message>
    <message>
        <source>&lt;b&gt;Not saved:&lt;/b&gt;&lt;br&gt;</source>
        <translation>&lt;b&gt;未保存：&lt;/b&gt;&lt;br&gt;</translation>
    </message>
    <message>
        <source>Save preset</source>
        <translation>保存预设</translation>
    </message>
    <message>
        <source>Odyssey presets (*.yaml)</source>
        <translation>Odyssey 预设 (*.yaml)</translation>
    </message>
    <message>
        <source>Import a swift sft command</source>
        <translation>导入 swift sft 命令</translation>
    </message>
    <message>
        <source>Paste a &lt;tt&gt;swift sft&lt;/tt&gt; command (with its environment prefix and \ continuations). Nothing is run.</source>
        <translation>粘贴一条 &lt;tt&gt;swift sft&lt;/tt&gt; 命令（可带环境变量前缀和 \ 续行）。不会执行任何命令。</translation>
    </message>
    <message>
        <source>&lt;b&gt;The swift command was not imported&lt;/b&gt; — the form is unchanged:&lt;br&gt;</source>
        <translation>&lt;b&gt;未导入 swift 命令&lt;/b&gt; —— 表单保持不变：&lt;br&gt;</translation>
    </message>
    <message>
        <source>&lt;b&gt;Imported with warnings:&lt;/b&gt;&lt;br&gt;</source>
        <translation>&lt;b&gt;已导入，但有警告：&lt;/b&gt;&lt;br&gt;</translation>
    </message>
    <message>
        <source>&lt;span style=&apos;color:%1&apos;&gt;&lt;b&gt;%2 error(s)&lt;/b&gt;&lt;/span&gt;, %3 warning(s) — marked at their fields. First: %4</source>
        <translation>&lt;span style=&apos;color:%1&apos;&gt;&lt;b&gt;%2 个错误&lt;/b&gt;&lt;/span&gt;，%3 个警告 —— 已在对应字段处标出。第一个：%4</translation>
    </message>
    <message>
        <source>Checking the model and dataset files as odyssey-train will…</source>
        <translation>正在按 odyssey-train 的方式检查模型和数据集文件…</translation>
    </message>
    <message>
        <source>&lt;span style=&apos;color:%1&apos;&gt;Valid&lt;/span&gt;, %2 warning(s) — shown at their fields.</source>
        <translation>&lt;span style=&apos;color:%1&apos;&gt;配置有效&lt;/span&gt;，%2 个警告 —— 已在对应字段处显示。</translation>
    </message>
    <message>
        <source>&lt;span style=&apos;color:%1&apos;&gt;Valid configuration.&lt;/span&gt;</source>
        <translation>&lt;span style=&apos;color:%1&apos;&gt;配置有效。&lt;/span&gt;</translation>
    </message>
    <message>
        <source>Fix the fields marked in red first.</source>
        <translation>请先修正标红的字段。</translation>
    </message>
    <message>
        <source>The job started from this window is still starting or running: stop it, or wait for it to end.</source>
        <translation>从本窗口启动的任务仍在启动或运行中：请停止它，或等待它结束。</translation>
    </message>
    <message>
        <source>A job is running in this output folder (%1): stop it, wait for it to end, or choose another output_dir.</source>
        <translation>此输出目录中有任务正在运行（%1）：请停止它、等待它结束，或换一个 output_dir。</translation>
    </message>
    <message>
        <source>Checking the model and dataset files as odyssey-train will before it starts…</source>
        <translation>正在按 odyssey-train 启动前的方式检查模型和数据集文件…</translation>
    </message>
    <message>
        <source>Save this configuration under %1/.odyssey-launch/ and run odyssey-train with it in the background (closing the window does not stop it); the Monitor follows the run.</source>
        <translation>将此配置保存到 %1/.odyssey-launch/ 下，并用它在后台运行 odyssey-train（关闭窗口不会停止训练）；监控页会跟踪该运行。</translation>
    </message>
    <message>
        <source>&lt;b&gt;Not started:&lt;/b&gt; odyssey-train was not found beside this program, in ../app or on PATH (ODYSSEY_TRAIN_BIN names it explicitly).</source>
        <translation>&lt;b&gt;未启动：&lt;/b&gt;在本程序旁、../app 或 PATH 中都未找到 odyssey-train（可用 ODYSSEY_TRAIN_BIN 明确指定）。</translation>
    </message>
    <message>
        <source>&lt;b&gt;Not started:&lt;/b&gt; %1</source>
        <translation>&lt;b&gt;未启动：&lt;/b&gt;%1</translation>
    </message>
    <message>
        <source>Kill…</source>
        <translation>强制结束…</translation>
    </message>
    <message>
        <source>The job is stopping (it finishes the step and saves a checkpoint). Kill ends it at once with SIGKILL, without a final checkpoint.</source>
        <translation>任务正在停止（会完成当前步并保存检查点）。强制结束会立即发送 SIGKILL，不保存最终检查点。</translation>
    </message>
    <message>
        <source>Ask the job (pid %1 on %2) to stop: it finishes the step, saves a checkpoint and exits.</source>
        <translation>请求任务（%2 上的 pid %1）停止：它会完成当前步、保存检查点后退出。</translation>
    </message>
    <message>
        <source>Kill the job?</source>
        <translation>强制结束任务？</translation>
    </message>
    <message>
        <source>Kill odyssey-train (pid %1) now with SIGKILL? The step in progress is lost and no final checkpoint is written; the last saved checkpoint stays.</source>
        <translation>现在用 SIGKILL 强制结束 odyssey-train（pid %1）吗？正在进行的这一步会丢失，也不会写入最终检查点；上一次保存的检查点会保留。</translation>
    </message>
    <message>
        <source>The Monitor follows %1, which is still running.</source>
        <translation>监控页正在跟踪仍在运行的 %1。</translation>
    </message>
    <message>
        <source>untitled</source>
        <translation>未命名</translation>
    </message>
    <message>
        <source>&lt;b&gt;Loaded the configuration of %1&lt;/b&gt; (its config.yaml) as an untitled preset.</source>
        <translation>&lt;b&gt;已将 %1 的配置&lt;/b&gt;（其 config.yaml）载入为未命名的预设。</translation>
    </message>
    <message>
        <source> Start training resumes it from %1 (weights, optimizer state, data order and step).</source>
        <translation> “开始训练”将从 %1 断点续训（权重、优化器状态、数据顺序和步数）。</translation>
    </message>
    <message>
        <source> Start training runs it again; Save as… keeps it as a preset.</source>
        <translation> “开始训练”会再次运行它；“预设另存为…”可将其保存为预设。</translation>
    </message>
    <message>
        <source>Restart now</source>
        <translation>立即重启</translation>
    </message>
    <message>
        <source>Later</source>
        <translation>稍后</translation>
    </message>
    <message>
        <source>C&amp;hat</source>
        <translation>对话(&amp;H)</translation>
    </message>
    <message>
        <source>&amp;Evaluate</source>
        <translation>评估(&amp;E)</translation>
    </message>
    <message>
        <source>E&amp;xport</source>
        <translation>导出(&amp;X)</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::ModelPicker</name>
    <message>
        <source>Browse…</source>
        <translation>浏览…</translation>
    </message>
    <message>
        <source>Choose a local Hugging Face model directory (config.json, *.safetensors, tokenizer.json).</source>
        <translation>选择本地的 Hugging Face 模型目录（config.json、*.safetensors、tokenizer.json）。</translation>
    </message>
    <message>
        <source>Looking in the Hugging Face and ModelScope caches…</source>
        <translation>正在查找 Hugging Face 和 ModelScope 缓存…</translation>
    </message>
    <message>
        <source>Models already downloaded to the Hugging Face or ModelScope cache on this machine.</source>
        <translation>本机已下载到 Hugging Face 或 ModelScope 缓存中的模型。</translation>
    </message>
    <message>
        <source>%1 — %2 · %3</source>
        <translation>%1 — %2 · %3</translation>
    </message>
    <message>
        <source>%1 — %2 (text model) · %3</source>
        <translation>%1 — %2（文本模型）· %3</translation>
    </message>
    <message>
        <source>%1 — not supported: %2</source>
        <translation>%1 — 不支持：%2</translation>
    </message>
    <message>
        <source>No models in the Hugging Face or ModelScope cache</source>
        <translation>Hugging Face 和 ModelScope 缓存中没有模型</translation>
    </message>
    <message>
        <source>Cached models (%1, %2 supported)…</source>
        <translation>已缓存的模型（%1 个，%2 个受支持）…</translation>
    </message>
    <message>
        <source>Model directory</source>
        <translation>模型目录</translation>
    </message>
    <message>
        <source>Looking for the model…</source>
        <translation>正在查找模型…</translation>
    </message>
    <message>
        <source>&lt;b&gt;%1&lt;/b&gt; · %2 parameters · %3 layers · %4 heads · %5 KV heads · head dim %6 · max positions %7&lt;br&gt;&lt;small&gt;%8&lt;/small&gt;</source>
        <translation>&lt;b&gt;%1&lt;/b&gt; · %2 参数 · %3 层 · %4 个注意力头 · %5 个 KV 头 · 头维度 %6 · 最大位置 %7&lt;br&gt;&lt;small&gt;%8&lt;/small&gt;</translation>
    </message>
    <message>
        <source>directory %1</source>
        <translation>目录 %1</translation>
    </message>
    <message>
        <source>Hugging Face cache %1</source>
        <translation>Hugging Face 缓存 %1</translation>
    </message>
    <message>
        <source>Hugging Face cache %1 (revision %2)</source>
        <translation>Hugging Face 缓存 %1（版本 %2）</translation>
    </message>
    <message>
        <source>ModelScope cache %1</source>
        <translation>ModelScope 缓存 %1</translation>
    </message>
    <message>
        <source>bundled shape only (weights not on this machine)</source>
        <translation>仅有内置结构（本机没有权重）</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::MonitorPage</name>
    <message>
        <source>No output folder set.</source>
        <translation>未设置输出目录。</translation>
    </message>
    <message>
        <source>Open run directory…</source>
        <translation>打开运行目录…</translation>
    </message>
    <message>
        <source>Compare selected</source>
        <translation>对比所选</translation>
    </message>
    <message>
        <source>Overlay the loss curves of the selected runs and diff their configs</source>
        <translation>叠加所选运行的损失曲线，并比较它们的配置差异</translation>
    </message>
    <message>
        <source>No run attached. Double-click a run, or open a run directory.</source>
        <translation>未关联任何运行。双击一个运行，或打开一个运行目录。</translation>
    </message>
    <message>
        <source>Log-scale loss</source>
        <translation>损失用对数坐标</translation>
    </message>
    <message>
        <source> GB/s</source>
        <translation> GB/s</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>The link&apos;s measured bus bandwidth, drawn as a reference line (two H200 over NVLink: all-to-all about 240-330 GB/s)</source>
        <translation>实测链路的总线带宽，画成一条参考线（两张 H200 通过 NVLink：all-to-all 约 240-330 GB/s）</translation>
    </message>
    <message>
        <source>Link reference:</source>
        <translation>链路参考：</translation>
    </message>
    <message>
        <source>Loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>train (raw)</source>
        <translation>训练（原始值）</translation>
    </message>
    <message>
        <source>train (EMA 0.9)</source>
        <translation>训练（EMA 0.9）</translation>
    </message>
    <message>
        <source>eval</source>
        <translation>评估</translation>
    </message>
    <message>
        <source>Learning rate</source>
        <translation>学习率</translation>
    </message>
    <message>
        <source>lr</source>
        <translation>学习率</translation>
    </message>
    <message>
        <source>Throughput</source>
        <translation>吞吐量</translation>
    </message>
    <message>
        <source>tokens/s (all ranks)</source>
        <translation>token/s（合计）</translation>
    </message>
    <message>
        <source>tokens/s</source>
        <translation>token/s</translation>
    </message>
    <message>
        <source>Gradient norm (before clipping)</source>
        <translation>梯度范数（裁剪前）</translation>
    </message>
    <message>
        <source>norm</source>
        <translation>范数</translation>
    </message>
    <message>
        <source>grad norm</source>
        <translation>梯度范数</translation>
    </message>
    <message>
        <source>GPU memory per rank</source>
        <translation>每个 rank 的显存</translation>
    </message>
    <message>
        <source>GiB</source>
        <translation>GiB</translation>
    </message>
    <message>
        <source>peak </source>
        <translation>峰值 </translation>
    </message>
    <message>
        <source>reserved </source>
        <translation>保留 </translation>
    </message>
    <message>
        <source>Collective bus bandwidth</source>
        <translation>集合通信带宽</translation>
    </message>
    <message>
        <source>GB/s (nccl-tests busbw)</source>
        <translation>GB/s（nccl-tests busbw）</translation>
    </message>
    <message>
        <source>Drag to pan, wheel to zoom, double-click to follow the run again, right-click to export</source>
        <translation>拖动平移，滚轮缩放，双击重新跟随运行，右键导出</translation>
    </message>
    <message>
        <source>Charts</source>
        <translation>图表</translation>
    </message>
    <message>
        <source>Log</source>
        <translation>日志</translation>
    </message>
    <message>
        <source>Compare</source>
        <translation>对比</translation>
    </message>
    <message>
        <source>link measured %1 GB/s</source>
        <translation>实测链路 %1 GB/s</translation>
    </message>
    <message>
        <source>Runs in %1</source>
        <translation>%1 中的运行</translation>
    </message>
    <message>
        <source>No runs yet in %1: Start training creates the first, or open a run folder (Open run…).</source>
        <translation>%1 中还没有运行：点击“开始训练”创建第一个，或打开一个运行目录（打开运行目录…）。</translation>
    </message>
    <message numerus="yes">
        <source>Runs in %1 (%n run(s))</source>
        <translation>
            <numerusform>%1 中的运行（%n 个）</numerusform>
        </translation>
    </message>
    <message>
        <source>Open run directory</source>
        <translation>打开运行目录</translation>
    </message>
    <message>
        <source>%1 is not a run directory (it has neither status.json nor events.jsonl); still showing %2.</source>
        <translation>%1 不是运行目录（既没有 status.json 也没有 events.jsonl）；仍显示 %2。</translation>
    </message>
    <message>
        <source>no run</source>
        <translation>无运行</translation>
    </message>
    <message>
        <source>%1/logs/rank-0.log</source>
        <translation>%1/logs/rank-0.log</translation>
    </message>
    <message>
        <source>events.jsonl was replaced or truncated: the charts restart from its first line.</source>
        <translation>events.jsonl 被替换或截断：图表从它的第一行重新开始。</translation>
    </message>
    <message>
        <source>no GPU memory recorded: this run trains on the CPU</source>
        <translation>没有显存记录：此运行在 CPU 上训练</translation>
    </message>
    <message>
        <source>waiting for the first step…</source>
        <translation>等待第一步…</translation>
    </message>
    <message>
        <source>no collectives recorded: a single-process run</source>
        <translation>没有集合通信记录：单进程运行</translation>
    </message>
    <message numerus="yes">
        <source>%n earlier message(s) not shown</source>
        <translation>
            <numerusform>另有 %n 条较早的消息未显示</numerusform>
        </translation>
    </message>
    <message>
        <source>reading events.jsonl %1%</source>
        <translation>正在读取 events.jsonl %1%</translation>
    </message>
    <message>
        <source>step %1 / %2</source>
        <translation>第 %1 / %2 步</translation>
    </message>
    <message>
        <source>step %1</source>
        <translation>第 %1 步</translation>
    </message>
    <message>
        <source>loss %1</source>
        <translation>损失 %1</translation>
    </message>
    <message>
        <source>elapsed %1</source>
        <translation>已用时 %1</translation>
    </message>
    <message>
        <source>ETA %1</source>
        <translation>预计剩余 %1</translation>
    </message>
    <message>
        <source>no step yet</source>
        <translation>尚无训练步</translation>
    </message>
    <message>
        <source>  ·  %1 processes on the CPU (dp %2 × sp %3, ulysses %4 × ring %5)</source>
        <translation>  ·  CPU 上 %1 个进程（dp %2 × sp %3，ulysses %4 × ring %5）</translation>
    </message>
    <message>
        <source>  ·  %1 GPUs (dp %2 × sp %3, ulysses %4 × ring %5)</source>
        <translation>  ·  %1 张 GPU（dp %2 × sp %3，ulysses %4 × ring %5）</translation>
    </message>
    <message>
        <source>  ·  %1, %2 GiB optimizer state%3</source>
        <translation>  ·  %1，优化器状态 %2 GiB%3</translation>
    </message>
    <message>
        <source> + %1 GiB in host memory</source>
        <translation> + 主机内存中 %1 GiB</translation>
    </message>
    <message>
        <source> per rank</source>
        <translation>（每个 rank）</translation>
    </message>
    <message>
        <source>rank %1</source>
        <translation>rank %1</translation>
    </message>
    <message>
        <source>, </source>
        <translation>，</translation>
    </message>
    <message>
        <source>exit code %1</source>
        <translation>退出码 %1</translation>
    </message>
    <message>
        <source>the job stopped responding: no live process and no heartbeat for %1 s</source>
        <translation>任务已无响应：%1 秒内没有存活的进程，也没有心跳</translation>
    </message>
    <message>
        <source>no reason was recorded</source>
        <translation>没有记录原因</translation>
    </message>
    <message>
        <source>&lt;b&gt;Run failed:&lt;/b&gt; %1</source>
        <translation>&lt;b&gt;运行失败：&lt;/b&gt;%1</translation>
    </message>
    <message>
        <source>Show on the Monitor</source>
        <translation>在监控页显示</translation>
    </message>
    <message>
        <source>Load this run&apos;s configuration</source>
        <translation>载入此运行的配置</translation>
    </message>
    <message>
        <source>Fill the form with the configuration %1 trained with (its config.yaml), as an untitled preset.</source>
        <translation>用 %1 训练时的配置（其 config.yaml）填充表单，作为未命名的预设。</translation>
    </message>
    <message>
        <source>%1 has no config.yaml.</source>
        <translation>%1 没有 config.yaml。</translation>
    </message>
    <message>
        <source>Resume from checkpoint</source>
        <translation>断点续训</translation>
    </message>
    <message>
        <source>(no checkpoints saved)</source>
        <translation>（没有已保存的检查点）</translation>
    </message>
    <message>
        <source>Open output folder</source>
        <translation>打开输出目录</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::PlanItemsModel</name>
    <message>
        <source>
(Not live at the peak: a working set of another phase.)</source>
        <translation>
（峰值时不占用：属于另一阶段的工作集。）</translation>
    </message>
    <message>
        <source>Item</source>
        <translation>项目</translation>
    </message>
    <message>
        <source>Group</source>
        <translation>类别</translation>
    </message>
    <message>
        <source>Per GPU</source>
        <translation>每张 GPU</translation>
    </message>
    <message>
        <source>runtime</source>
        <translation>运行时</translation>
    </message>
    <message>
        <source>model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>gradients</source>
        <translation>梯度</translation>
    </message>
    <message>
        <source>optimizer</source>
        <translation>优化器</translation>
    </message>
    <message>
        <source>activations</source>
        <translation>激活</translation>
    </message>
    <message>
        <source>loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>communication</source>
        <translation>通信</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::PlannerGauge</name>
    <message>
        <source>Memory of each GPU as CUDA reports it (an H200: 139.8 GiB). When NVIDIA GPUs are detected (Advanced, GPUs) this follows the smallest one used; you can still edit it.</source>
        <translation>每张 GPU 的显存，按 CUDA 报告的值（一张 H200：139.8 GiB）。检测到 NVIDIA GPU 时（高级页的 GPU 部分），取所用 GPU 中最小的那张；仍可手动修改。</translation>
    </message>
    <message>
        <source>GPU memory</source>
        <translation>GPU 显存</translation>
    </message>
    <message>
        <source>Looking for the model…</source>
        <translation>正在查找模型…</translation>
    </message>
    <message>
        <source>No memory plan: the planner needs the model&apos;s config.json.</source>
        <translation>无显存规划：规划器需要模型的 config.json。</translation>
    </message>
    <message>
        <source>per process in host memory</source>
        <translation>每个进程占用的主机内存</translation>
    </message>
    <message>
        <source>per GPU</source>
        <translation>每张 GPU</translation>
    </message>
    <message>
        <source>&lt;span style=&apos;font-size:large;color:%1&apos;&gt;&lt;b&gt;%2&lt;/b&gt;&lt;/span&gt; predicted peak %3 of %4 &lt;b style=&apos;color:%1&apos;&gt;%5&lt;/b&gt;&lt;br&gt;&lt;small&gt;peak during %6 · %7 tokens per GPU · %8 of %9 layers recomputed&lt;/small&gt;</source>
        <translation>&lt;span style=&apos;font-size:large;color:%1&apos;&gt;&lt;b&gt;%2&lt;/b&gt;&lt;/span&gt; 预测峰值（%3），容量 %4 &lt;b style=&apos;color:%1&apos;&gt;%5&lt;/b&gt;&lt;br&gt;&lt;small&gt;峰值出现在%6阶段 · 每张 GPU %7 个 token · %9 层中重计算 %8 层&lt;/small&gt;</translation>
    </message>
    <message>
        <source>&lt;br&gt;&lt;small style=&apos;color:%1&apos;&gt;in host memory (offloaded): %2 of the %3 this machine may pin%4&lt;/small&gt;</source>
        <translation>&lt;br&gt;&lt;small style=&apos;color:%1&apos;&gt;主机内存（卸载）：%2，本机最多可锁定 %3%4&lt;/small&gt;</translation>
    </message>
    <message>
        <source> — too much</source>
        <translation> — 超出</translation>
    </message>
    <message>
        <source>— fits</source>
        <translation>—— 可容纳</translation>
    </message>
    <message>
        <source>— does not fit</source>
        <translation>—— 超出容量</translation>
    </message>
    <message>
        <source>Largest max_length that fits: &lt;b&gt;%1&lt;/b&gt; tokens</source>
        <translation>可容纳的最大 max_length：&lt;b&gt;%1&lt;/b&gt; 个 token</translation>
    </message>
    <message>
        <source>Largest max_length that fits: &lt;b&gt;none&lt;/b&gt; (even the shortest does not)</source>
        <translation>可容纳的最大 max_length：&lt;b&gt;无&lt;/b&gt;（最短的也超出容量）</translation>
    </message>
    <message>
        <source>Smallest sequence-parallel size that fits: &lt;b&gt;%1&lt;/b&gt;</source>
        <translation>可容纳的最小序列并行度：&lt;b&gt;%1&lt;/b&gt;</translation>
    </message>
    <message>
        <source>Smallest sequence-parallel size that fits: &lt;b&gt;none up to %1 GPUs&lt;/b&gt;</source>
        <translation>可容纳的最小序列并行度：&lt;b&gt;直到 %1 张 GPU 都无法容纳&lt;/b&gt;</translation>
    </message>
    <message>
        <source>capacity %1</source>
        <translation>容量 %1</translation>
    </message>
    <message>
        <source>the loss</source>
        <translation>损失计算</translation>
    </message>
    <message>
        <source>the backward pass</source>
        <translation>反向传播</translation>
    </message>
    <message>
        <source>the optimizer step</source>
        <translation>优化器更新</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::RunsModel</name>
    <message>
        <source>Run</source>
        <translation>运行</translation>
    </message>
    <message>
        <source>State</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>Step</source>
        <translation>步数</translation>
    </message>
    <message>
        <source>Loss</source>
        <translation>损失</translation>
    </message>
    <message>
        <source>Elapsed</source>
        <translation>已用时</translation>
    </message>
    <message>
        <source>ETA</source>
        <translation>预计剩余</translation>
    </message>
</context>
<context>
    <name>odyssey::ui::TrainPage</name>
    <message>
        <source>16-bit (the model&apos;s dtype)</source>
        <translation>16 位（模型的数据类型）</translation>
    </message>
    <message>
        <source>4-bit NF4 (QLoRA)</source>
        <translation>4 位 NF4（QLoRA）</translation>
    </message>
    <message>
        <source>4-bit FP4 (QLoRA)</source>
        <translation>4 位 FP4（QLoRA）</translation>
    </message>
    <message>
        <source>quant_bits and bnb_4bit_quant_type: the frozen base quantized to 4 bits as it loads, in bitsandbytes&apos; layout, under LoRA adapters (QLoRA; ms-swift: --quant_bits 4). Double quantization and the compute dtype are on the Advanced page.</source>
        <translation>quant_bits 与 bnb_4bit_quant_type：冻结的基座在加载时按 bitsandbytes 的布局量化为 4 位，其上训练 LoRA 适配器（QLoRA；ms-swift：--quant_bits 4）。双重量化与计算数据类型在“高级”页设置。</translation>
    </message>
    <message>
        <source>Base weights</source>
        <translation>基座权重</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Training data</source>
        <translation>训练数据</translation>
    </message>
    <message>
        <source>

Double-click &quot;Use&quot; to draw N samples (path#N).</source>
        <translation>

双击“使用”列可抽取 N 条样本（path#N）。</translation>
    </message>
    <message>
        <source>Add files…</source>
        <translation>添加文件…</translation>
    </message>
    <message>
        <source>Remove</source>
        <translation>移除</translation>
    </message>
    <message>
        <source>Training</source>
        <translation>训练</translation>
    </message>
    <message>
        <source>Browse…</source>
        <translation>浏览…</translation>
    </message>
    <message>
        <source>Output folder</source>
        <translation>输出目录</translation>
    </message>
    <message>
        <source>Data preview</source>
        <translation>数据预览</translation>
    </message>
    <message>
        <source>Training files</source>
        <translation>训练文件</translation>
    </message>
    <message>
        <source>JSON Lines or JSON (*.jsonl *.json);;All files (*)</source>
        <translation>JSON Lines 或 JSON (*.jsonl *.json);;所有文件 (*)</translation>
    </message>
</context>
</TS>
