//! `rlx serve`: the OpenAI-compatible server (rlx-serve) on a model file or folder, with a
//! loading bar, a log line per request, and a graceful stop on Ctrl-C.

use indicatif::{ProgressBar, ProgressStyle};
use rlx::models::llama::batch::BatchConfig;
use rlx::{Device, Session};
use rlx_serve::{load_embedder, load_llm, model_name, AppState, LlmOptions};
use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// What to serve and where.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// A Llama-family .gguf file or Hugging Face folder to serve for chat and completions.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// The id clients name the model by (its file stem or folder name by default).
    #[arg(long)]
    pub name: Option<String>,
    /// A sentence-transformers BERT folder to serve for /v1/embeddings.
    #[arg(long)]
    pub embedding_model: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Positions one sequence may reach (the model's context when smaller).
    #[arg(long, default_value_t = 4096)]
    pub ctx: usize,
    /// MiB of KV cache shared by all sequences; requests beyond it wait in a queue.
    #[arg(long, default_value_t = 512)]
    pub kv_memory: usize,
    /// Most sequences decoded in one step.
    #[arg(long, default_value_t = BatchConfig::default().max_batch)]
    pub max_batch: usize,
    /// Where to run: cpu, cuda[:N].
    #[arg(long, default_value = "cpu")]
    pub device: Device,
}

pub fn run(a: &ServeArgs) -> Result<(), Box<dyn Error>> {
    if a.model.is_none() && a.embedding_model.is_none() {
        return Err("give --model, --embedding-model or both".into());
    }
    let session = Session::new(a.device)?;
    let mut engine = None;
    let llm = match &a.model {
        Some(path) => {
            let bar = ProgressBar::new(0).with_style(ProgressStyle::with_template("loading {msg} {bar:30} {pos}/{len} tensors")?);
            bar.set_message(path.display().to_string());
            let progress = |done: usize, total: usize| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            };
            let batch = BatchConfig { max_batch: a.max_batch.max(1), ..BatchConfig::default() };
            let o = LlmOptions { context: Some(a.ctx), kv_bytes: a.kv_memory << 20, batch };
            let name = a.name.clone().unwrap_or_else(|| model_name(path));
            let (llm, thread) = load_llm(path, name, &o, &session, progress)?;
            bar.finish_and_clear();
            engine = Some(thread);
            Some(llm)
        }
        None => None,
    };
    let embedder = match &a.embedding_model {
        Some(dir) => Some(load_embedder(dir, model_name(dir), &session)?),
        None => None,
    };
    let state = AppState::new(llm, embedder);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(rlx_serve::serve(SocketAddr::new(a.host, a.port), state, async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("Ctrl-C: finishing open requests, then stopping");
    }))?;
    if let Some(stats) = engine.and_then(|t| t.join().ok()) {
        let mean = stats.decode_sequences as f64 / stats.decode_steps.max(1) as f64;
        tracing::info!("stopped after {} steps ({} prompt tokens prefilled, {} decode steps of {mean:.1} sequences on average)", stats.steps, stats.prefill_tokens, stats.decode_steps);
    }
    Ok(())
}
