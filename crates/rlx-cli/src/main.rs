//! The `rlx` command.

use rlx_cli::demo;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "rlx", version, about = "rlx: an ML compiler and runtime")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a character-level GPT on Shakespeare on the CPU (or another job), with no download.
    #[command(args_conflicts_with_subcommands = true)]
    Demo {
        #[command(subcommand)]
        job: Option<DemoJob>,
        /// Training steps.
        #[arg(long)]
        steps: Option<usize>,
        /// Folder for the loss curve (loss.svg).
        #[arg(long, default_value = "rlx-demo")]
        out: std::path::PathBuf,
        /// Where the character GPT trains: cpu, cuda[:N], wgpu[:N].
        #[arg(long, default_value = "cpu")]
        device: rlx::Device,
    },
    /// Sentence embeddings from a sentence-transformers BERT folder (e.g. all-MiniLM-L6-v2).
    Embed {
        /// Folder with config.json, model.safetensors, tokenizer.json (and modules.json).
        #[arg(long)]
        model: std::path::PathBuf,
        /// Print every vector in full as JSON.
        #[arg(long)]
        json: bool,
        /// Where to run: cpu, cuda[:N], wgpu[:N].
        #[arg(long, default_value = "cpu")]
        device: rlx::Device,
        /// What the encoder computes in (weights stay f32; embeddings come out f32); int8
        /// rounds each product's weight and activations to 8 bits (CPU).
        #[arg(long, alias = "precision", value_enum, default_value = "f32")]
        compute: rlx_cli::embed::Compute,
        texts: Vec<String>,
    },
    /// Run an ONNX model on .npy inputs (the conformance runner's protocol), or --bench it.
    OnnxRun(rlx_cli::onnx_run::OnnxRunArgs),
    /// Generate text with a Llama-family model (SmolLM2, Qwen2/3, Gemma3), streaming tokens as they come.
    Generate {
        /// The .gguf file, or a Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json).
        #[arg(long)]
        model: std::path::PathBuf,
        /// The prompt, verbatim (`<|im_start|>`-style special tokens are recognised).
        #[arg(long, required_unless_present = "chat", conflicts_with = "chat")]
        prompt: Option<String>,
        /// A question put through the model's chat template as one user turn; prints the reply.
        #[arg(long)]
        chat: Option<String>,
        /// Most new tokens.
        #[arg(short = 'n', long, default_value_t = 64)]
        n: usize,
        /// 0 is greedy.
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        /// Keep the k most likely tokens (0: all).
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        /// Keep the most likely tokens up to this probability mass.
        #[arg(long, default_value_t = 1.0)]
        top_p: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Where to run: cpu, cuda[:N], wgpu[:N].
        #[arg(long, default_value = "cpu")]
        device: rlx::Device,
    },
    /// Chat with a Llama-family model in the terminal (history kept, replies streamed).
    Chat {
        /// The .gguf file, or a Hugging Face checkpoint folder.
        #[arg(long)]
        model: std::path::PathBuf,
        /// A system message opening the conversation.
        #[arg(long)]
        system: Option<String>,
        /// Most tokens of one reply.
        #[arg(short = 'n', long, default_value_t = 512)]
        n: usize,
        /// Tokens the whole conversation may take (the model's context when smaller).
        #[arg(long, default_value_t = 4096)]
        ctx: usize,
        #[arg(long, default_value_t = 0.7)]
        temperature: f32,
        #[arg(long, default_value_t = 0)]
        top_k: usize,
        #[arg(long, default_value_t = 0.9)]
        top_p: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Where to run: cpu, cuda[:N].
        #[arg(long, default_value = "cpu")]
        device: rlx::Device,
    },
    /// Serve a model over an OpenAI-compatible HTTP API (chat, completions, embeddings), batching concurrent requests.
    Serve(rlx_cli::serve::ServeArgs),
    /// Print this machine's CPU, the instruction-set extensions rlx's kernels use and the kernels chosen for it.
    Info,
    /// Time the f32 GEMM's register tiles and cache blocking on this CPU (a few seconds), print the table and cache the choice for later runs.
    Tune {
        /// A product to time, `MxKxN` (repeatable; default 512x512x512, 1024x1024x1024 and 128x384x1536).
        #[arg(long = "shape", value_parser = shape)]
        shapes: Vec<[usize; 3]>,
        /// Timed rounds per candidate and shape; the median is kept.
        #[arg(long, default_value_t = rlx::cpu::kernels::matmul::tune::ROUNDS)]
        rounds: usize,
        /// Print the table without writing the cache file.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the op-coverage matrix (op kind × backend).
    Ops {
        /// Print the markdown of docs/op-coverage.md instead of a terminal table.
        #[arg(long)]
        markdown: bool,
    },
}

#[derive(Subcommand)]
enum DemoJob {
    /// Build, compile and run one transformer block with random weights, explaining each step.
    Block,
    /// Train a small CNN on the 8×8 handwritten digits shipped with rlx and report its test accuracy.
    Digits {
        /// Passes over the 1,437 training images.
        #[arg(long, default_value_t = demo::digits::DigitsOptions::default().epochs)]
        epochs: usize,
        /// Seeds the train/test split, the batch order and the initial weights.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn main() {
    let cli = Cli::parse();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_target(false).with_ansi(ansi).init();
    let result = match cli.command {
        Command::Demo { job, steps, out, device } => match job {
            None => demo::charlm::run(steps, out, device),
            Some(DemoJob::Block) => demo::block::run(),
            Some(DemoJob::Digits { epochs, seed }) => demo::digits::run(&demo::digits::DigitsOptions { epochs, seed, ..Default::default() }),
        },
        Command::Embed { model, json, device, compute, texts } => rlx_cli::embed::run(&model, &texts, json, device, compute).map_err(Into::into),
        Command::OnnxRun(args) => std::process::exit(rlx_cli::onnx_run::main(&args)),
        Command::Generate { model, prompt, chat, n, temperature, top_k, top_p, seed, device } => rlx_cli::generate::run(&rlx_cli::generate::GenerateOptions {
            model,
            chat: chat.is_some(),
            prompt: chat.or(prompt).unwrap_or_default(),
            n,
            sampling: rlx::models::llama::Sampling { temperature, top_k, top_p, seed },
            device,
        }),
        Command::Chat { model, system, n, ctx, temperature, top_k, top_p, seed, device } => rlx_cli::chat::run(&rlx_cli::chat::ChatOptions {
            model,
            system,
            n,
            context: ctx,
            sampling: rlx::models::llama::Sampling { temperature, top_k, top_p, seed },
            device,
        }),
        Command::Serve(args) => rlx_cli::serve::run(&args),
        Command::Info => {
            print!("{}", rlx::cpu::machine::machine());
            Ok(())
        }
        Command::Tune { shapes, rounds, dry_run } => tune(&shapes, rounds, dry_run),
        Command::Ops { markdown } => {
            ops(markdown);
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// `rlx tune`: measures, prints the table and the choice, and writes this machine's cache file
/// (which the kernels read from the next process on).
fn tune(shapes: &[[usize; 3]], rounds: usize, dry_run: bool) -> Result<(), Box<dyn std::error::Error>> {
    use rlx::cpu::kernels::matmul::tune;
    let machine = rlx::cpu::machine::machine();
    println!("cpu       {} ({})", machine.cpu, machine.id);
    // Other work on the cores skews every timing: say how busy the machine was.
    if let Some(load) = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok()) {
        let busy = load >= 0.5 * machine.threads as f64;
        println!("load      {load:.2} (1-minute average before timing, {} threads){}", machine.threads, if busy { ": other work is running, the figures may be off" } else { "" });
    }
    println!();
    let tuning = tune::tune(if shapes.is_empty() { &tune::SHAPES } else { shapes }, rounds)?;
    print!("{tuning}");
    let choice = tuning.choice();
    if tuning.chosen == tuning.default {
        println!("\nchosen: {choice}, the default (no candidate was {:.0}% faster)", (tune::MARGIN - 1.0) * 100.0);
    } else {
        println!("\nchosen: {choice}, {:.1}% faster than the default", (tuning.gain() - 1.0) * 100.0);
    }
    if dry_run {
        return Ok(());
    }
    let path = rlx::cpu::tuned::path().ok_or("no cache folder: set RLX_CACHE_DIR (or XDG_CACHE_HOME or HOME)")?;
    choice.tuned().write(&path, &rlx::cpu::machine::key()).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("wrote {} (read from the next run on; environment variables still win over it)", path.display());
    Ok(())
}

/// A product's shape from `MxKxN`.
fn shape(text: &str) -> Result<[usize; 3], String> {
    let dims: Vec<usize> = text.split(['x', '×']).map(|d| d.trim().parse::<usize>().map_err(|e| format!("{d:?}: {e}"))).collect::<Result<_, _>>()?;
    dims.try_into().map_err(|d: Vec<usize>| format!("{text:?} has {} dimensions, not 3 (MxKxN)", d.len()))
}

fn ops(markdown: bool) {
    if markdown {
        print!("{}", rlx::coverage::markdown());
        return;
    }
    let backends = rlx::coverage::backends();
    print!("{:<34} {:<12}", "kind", "family");
    for b in &backends {
        print!(" {:<10}", b.name);
    }
    println!();
    for (kind, cells) in rlx::coverage::matrix(&backends) {
        print!("{:<34} {:<12}", kind.name(), kind.family());
        for c in cells {
            print!(" {:<10}", c.to_string());
        }
        println!();
    }
    for (b, t) in backends.iter().zip(rlx::coverage::totals(&backends)) {
        println!("\n{}: {t}", b.name);
    }
}
