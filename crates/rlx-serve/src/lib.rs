//! `rlx serve`: an OpenAI-compatible HTTP server (axum on tokio) over a Llama-family model,
//! whose concurrent requests are decoded together by continuous batching
//! ([`rlx::models::llama::batch`]), and optionally a BERT sentence-embedding model.
//!
//! Requests are parsed and checked on the async side (errors as OpenAI's 4xx bodies), turned
//! into token sequences, and queued for the engine thread, which owns the compiled model and
//! steps every running sequence together; tokens come back on a channel per request, as one
//! JSON body or as server-sent events. A request whose client goes away drops its channel,
//! and the engine cancels the sequence at its next step.

pub mod api;
pub mod engine;
mod routes;
pub mod text;

use engine::Engine;
use rlx::models::bert::SentenceEncoder;
use rlx::models::bpe::BpeTokenizer;
use rlx::models::chat::{end_of_turn_tokens, ChatTemplate};
use rlx::models::llama::batch::{slot_bytes, BatchConfig, Batcher, PooledDecoder, PooledLlama};
use rlx::models::llama::{GgufModel, HfModel, LlamaConfig, Weights};
use rlx::Session;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use routes::router;

/// A failure starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Model(#[from] rlx::models::ModelError),
    #[error(transparent)]
    Bert(#[from] rlx::models::bert::BertError),
    #[error(transparent)]
    Runtime(#[from] rlx::RuntimeError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Config(String),
}

/// The language model being served.
pub struct Llm {
    /// The id requests name it by.
    pub name: String,
    pub tokenizer: Arc<BpeTokenizer>,
    pub template: ChatTemplate,
    /// Tokens that end a reply.
    pub stops: Vec<u32>,
    /// Positions a sequence may reach.
    pub context: usize,
    pub engine: Engine,
}

/// The embedding model being served.
pub struct Embedder {
    pub name: String,
    pub encoder: Arc<Mutex<SentenceEncoder>>,
}

/// What the handlers share.
pub struct AppState {
    pub llm: Option<Llm>,
    pub embedder: Option<Embedder>,
    /// When the server started (the models' `created`).
    pub created: u64,
    ids: AtomicU64,
}

impl AppState {
    pub fn new(llm: Option<Llm>, embedder: Option<Embedder>) -> AppState {
        let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        AppState { llm, embedder, created, ids: AtomicU64::new(0) }
    }

    /// A fresh response id.
    fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }
}

/// How the language model is loaded and batched.
#[derive(Clone, Debug)]
pub struct LlmOptions {
    /// Positions a sequence may reach (the model's own context when `None` or larger).
    pub context: Option<usize>,
    /// Bytes of KV cache for all sequences together.
    pub kv_bytes: usize,
    pub batch: BatchConfig,
}

impl Default for LlmOptions {
    fn default() -> LlmOptions {
        LlmOptions { context: Some(4096), kv_bytes: 512 << 20, batch: BatchConfig::default() }
    }
}

/// The name a model file or folder is served under: its file stem or folder name.
pub fn model_name(path: &Path) -> String {
    let stem = if path.is_dir() { path.file_name() } else { path.file_stem() };
    stem.map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

/// Loads the GGUF file or Hugging Face folder at `path` and starts serving it ([`start_llm`]);
/// `progress` is called with (tensors read, total).
pub fn load_llm(path: &Path, name: String, o: &LlmOptions, session: &Session, progress: impl FnMut(usize, usize)) -> Result<(Llm, EngineThread), ServeError> {
    let (tokenizer, config, weights) = if path.is_dir() {
        let m = HfModel::open(path, progress)?;
        (m.tokenizer, m.config, m.weights)
    } else {
        let m = GgufModel::open(path, progress)?;
        (m.tokenizer, m.config, m.weights)
    };
    start_llm(name, tokenizer, &config, weights, o, session)
}

/// The engine thread; joining it gives its counters once every [`Engine`] handle is dropped.
pub type EngineThread = std::thread::JoinHandle<engine::EngineStats>;

/// Compiles the pooled decoder of `config` over `weights` on `session` and starts its engine.
pub fn start_llm(name: String, tokenizer: BpeTokenizer, config: &LlamaConfig, weights: Weights, o: &LlmOptions, session: &Session) -> Result<(Llm, EngineThread), ServeError> {
    let context = o.context.map_or(config.context, |c| c.min(config.context)).max(2);
    let block = o.batch.block.max(1);
    let slots = o.kv_bytes / slot_bytes(config) / block * block;
    if slots < block {
        return Err(ServeError::Config(format!("a KV budget of {} bytes holds no block of {block} slots ({} bytes a slot)", o.kv_bytes, slot_bytes(config))));
    }
    let template = ChatTemplate::for_tokenizer(&tokenizer)?;
    if template.fallback {
        tracing::warn!("{name}: the model has no chat template; chat requests use ChatML");
    }
    let model = PooledLlama::build(config, &weights, slots, context)?;
    drop(weights);
    let decoder = PooledDecoder::new(model, session)?;
    let batcher = Batcher::new(decoder, o.batch.clone());
    tracing::info!(
        "{name}: context {context}, KV pool {slots} slots in blocks of {block} ({:.0} MiB), batches of up to {} sequences",
        (slots * slot_bytes(config)) as f64 / (1 << 20) as f64,
        o.batch.max_batch
    );
    let (engine, thread) = Engine::start(batcher)?;
    let stops = end_of_turn_tokens(&tokenizer);
    Ok((Llm { name, tokenizer: Arc::new(tokenizer), template, stops, context, engine }, thread))
}

/// Loads a sentence-transformers BERT folder.
pub fn load_embedder(dir: &Path, name: String, session: &Session) -> Result<Embedder, ServeError> {
    let encoder = SentenceEncoder::load(dir, session)?;
    Ok(Embedder { name, encoder: Arc::new(Mutex::new(encoder)) })
}

/// Serves `state` on `addr` until `shutdown` resolves, then lets open requests finish.
pub async fn serve(addr: SocketAddr, state: AppState, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    serve_on(listener, state, shutdown).await
}

/// [`serve`] on a bound listener (tests bind port 0).
pub async fn serve_on(listener: tokio::net::TcpListener, state: AppState, shutdown: impl std::future::Future<Output = ()> + Send + 'static) -> Result<(), ServeError> {
    axum::serve(listener, router(Arc::new(state))).with_graceful_shutdown(shutdown).await?;
    Ok(())
}
