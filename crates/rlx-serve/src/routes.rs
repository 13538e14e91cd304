//! The HTTP endpoints: `/v1/models`, `/v1/chat/completions`, `/v1/completions` (whole
//! responses or server-sent events) and `/v1/embeddings`.

use crate::api::{self, ApiError, ChatRequest, CompletionRequest, EmbeddingRequest, Generation, Input, Prompt, Usage};
use crate::engine::Out;
use crate::text::TextStream;
use crate::{AppState, Embedder, Llm};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use rlx::models::chat::{encode_rendered, Message};
use rlx::models::llama::batch::{Finish, SeqRequest};
use rlx::models::llama::Sampling;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The server's routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/health", get(health))
        .fallback(|| async { ApiError { status: axum::http::StatusCode::NOT_FOUND, ..ApiError::invalid("Unknown endpoint.", None) } })
        .with_state(state)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let names = state.llm.iter().map(|m| &m.name).chain(state.embedder.iter().map(|e| &e.name));
    let data: Vec<Value> = names.map(|n| json!({"id": n, "object": "model", "created": state.created, "owned_by": "rlx"})).collect();
    Json(json!({"object": "list", "data": data}))
}

/// `{"status": "ok"}` with the sequences queued and running.
async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let (queued, running) = state.llm.as_ref().map_or((0, 0), |m| m.engine.load());
    Json(json!({"status": "ok", "queued": queued, "running": running}))
}

/// The language model `name` names.
fn llm<'a>(state: &'a AppState, name: &str) -> Result<&'a Llm, ApiError> {
    state.llm.as_ref().filter(|m| m.name == name).ok_or_else(|| ApiError::unknown_model(name))
}

/// Which API a generation answers.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    Completion,
}

async fn chat(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let r = async {
        let req: ChatRequest = api::parse(&body)?;
        let m = llm(&state, &req.model)?;
        let messages = req.messages.iter().map(|msg| Ok(Message::new(&msg.role, &msg.text()?))).collect::<Result<Vec<_>, ApiError>>()?;
        if messages.is_empty() {
            return Err(ApiError::invalid("`messages` must hold at least one message.", Some("messages")));
        }
        let text = m.template.render(&messages, true).map_err(|e| ApiError::invalid(e.to_string(), Some("messages")))?;
        let prompt = encode_rendered(&m.tokenizer, &text);
        generate(&state, m, prompt, req.gen, Kind::Chat).await
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
}

async fn completions(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let r = async {
        let req: CompletionRequest = api::parse(&body)?;
        let m = llm(&state, &req.model)?;
        let text = match req.prompt {
            Prompt::One(s) => s,
            Prompt::Many(mut v) if v.len() == 1 => v.remove(0),
            Prompt::Many(_) => return Err(ApiError::invalid("Only one prompt per request is supported.", Some("prompt"))),
        };
        let prompt = m.tokenizer.encode(&text, true);
        generate(&state, m, prompt, req.gen, Kind::Completion).await
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
}

/// The sampling of a request's fields, checked as OpenAI checks them.
fn sampling(gen: &Generation) -> Result<Sampling, ApiError> {
    let temperature = gen.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(format!("{temperature} is not in [0, 2] - 'temperature'"), Some("temperature")));
    }
    let top_p = gen.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(format!("{top_p} is not in (0, 1] - 'top_p'"), Some("top_p")));
    }
    let seed = gen.seed.map_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64), |s| s as u64);
    Ok(Sampling { temperature: temperature as f32, top_k: 0, top_p: top_p as f32, seed })
}

/// Runs `prompt` on `m` and answers as `kind` asks: one JSON body, or events as tokens come.
async fn generate(state: &AppState, m: &Llm, prompt: Vec<u32>, gen: Generation, kind: Kind) -> Result<Response, ApiError> {
    if gen.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("Only n = 1 is supported.", Some("n")));
    }
    let (param, asked) = match (gen.max_completion_tokens, gen.max_tokens) {
        (Some(n), _) => ("max_completion_tokens", Some(n)),
        (None, n) => ("max_tokens", n),
    };
    if let Some(n) = asked.filter(|&n| n < 1) {
        return Err(ApiError::invalid(format!("Invalid '{param}': integer below minimum value. Expected a value >= 1, but got {n} instead."), Some(param)));
    }
    let sampling = sampling(&gen)?;
    if prompt.is_empty() {
        return Err(ApiError::invalid("The prompt has no tokens.", Some("prompt")));
    }
    if prompt.len() >= m.context {
        return Err(ApiError::too_long(m.context, prompt.len()));
    }
    let room = m.context - prompt.len();
    let default = if kind == Kind::Completion { 16 } else { room };
    let max_tokens = asked.map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX)).min(room);
    let prompt_tokens = prompt.len();
    let (tx, mut rx) = unbounded_channel();
    let req = SeqRequest { prompt, max_tokens, sampling, stop: m.stops.clone() };
    if !m.engine.submit(req, tx) {
        return Err(ApiError::internal("The engine has stopped."));
    }
    match rx.recv().await {
        Some(Out::Accepted) => {}
        Some(Out::Refused(why)) => return Err(ApiError::invalid(why, Some("messages"))),
        _ => return Err(ApiError::internal("The engine dropped the request.")),
    }
    let log = RequestLog { what: if kind == Kind::Chat { "chat" } else { "completion" }, prompt: prompt_tokens, completion: 0, start: Instant::now(), finish: None };
    let run = Run { rx, text: TextStream::new(gen.stop.strings()), tokenizer: m.tokenizer.clone(), log };
    let id = format!("{}-{:x}", if kind == Kind::Chat { "chatcmpl" } else { "cmpl" }, state.next_id());
    if gen.stream {
        let usage = gen.stream_options.is_some_and(|o| o.include_usage);
        return Ok(stream_response(run, kind, id, m.name.clone(), usage).into_response());
    }
    let (text, finish, usage) = run.collect().await?;
    let choice = match kind {
        Kind::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish}),
        Kind::Completion => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
    };
    let object = if kind == Kind::Chat { "chat.completion" } else { "text_completion" };
    Ok(Json(json!({"id": id, "object": object, "created": now(), "model": m.name, "choices": [choice], "usage": usage})).into_response())
}

/// One line per request when it ends (answered, stopped or abandoned by its client).
struct RequestLog {
    what: &'static str,
    prompt: usize,
    completion: usize,
    start: Instant,
    finish: Option<&'static str>,
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let secs = self.start.elapsed().as_secs_f64();
        tracing::info!(
            "{}: {} prompt + {} completion tokens in {:.2} s ({:.1} tok/s), {}",
            self.what,
            self.prompt,
            self.completion,
            secs,
            self.completion as f64 / secs.max(1e-9),
            self.finish.unwrap_or("cancelled (client gone)")
        );
    }
}

/// A sequence being answered: the engine's messages turned into text.
struct Run {
    rx: UnboundedReceiver<Out>,
    text: TextStream,
    tokenizer: Arc<rlx::models::bpe::BpeTokenizer>,
    log: RequestLog,
}

/// A piece of the answer.
enum Piece {
    Text(String),
    /// The end, with OpenAI's finish reason.
    End(&'static str),
}

impl Run {
    /// The next piece: text (possibly empty) or the end.
    async fn next(&mut self) -> Result<Piece, ApiError> {
        if let Some(reason) = self.log.finish {
            return Ok(Piece::End(reason));
        }
        match self.rx.recv().await {
            Some(Out::Token(t)) => {
                self.log.completion += 1;
                let text = self.text.push(&self.tokenizer.token_bytes(t, false));
                if self.text.stopped() {
                    // The receiver goes with this run, which cancels the sequence.
                    self.rx.close();
                    self.log.finish = Some("stop");
                }
                Ok(Piece::Text(text))
            }
            Some(Out::Done(f)) => {
                let rest = self.text.finish();
                self.log.finish = Some(if f == Finish::Length { "length" } else { "stop" });
                Ok(Piece::Text(rest))
            }
            Some(Out::Failed(why)) => Err(ApiError::internal(why)),
            Some(Out::Accepted) | Some(Out::Refused(_)) | None => {
                self.log.finish = Some("stop");
                Ok(Piece::End("stop"))
            }
        }
    }

    /// The whole answer: text, finish reason, usage.
    async fn collect(mut self) -> Result<(String, &'static str, Usage), ApiError> {
        let mut text = String::new();
        loop {
            match self.next().await? {
                Piece::Text(t) => text.push_str(&t),
                Piece::End(reason) => return Ok((text, reason, Usage::new(self.log.prompt, self.log.completion))),
            }
        }
    }
}

/// The answer as server-sent events: chunks as text comes, the finish reason, optionally the
/// usage, then `[DONE]`.
fn stream_response(run: Run, kind: Kind, id: String, model: String, usage: bool) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let created = now();
    let object = if kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" };
    let chunk = move |choice: Value, usage: Option<Usage>| {
        let mut v = json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
        if let Some(u) = usage {
            v["choices"] = json!([]);
            v["usage"] = json!(u);
        }
        Event::default().data(v.to_string())
    };
    let delta = move |text: Option<String>, finish: Option<&'static str>| match kind {
        Kind::Chat => {
            let delta = match text {
                Some(t) => json!({"content": t}),
                None => json!({}),
            };
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
        }
        Kind::Completion => json!({"index": 0, "text": text.unwrap_or_default(), "logprobs": null, "finish_reason": finish}),
    };
    /// Where the stream is.
    enum Phase {
        Start,
        Body,
        Usage,
        Done,
        Over,
    }
    let state = (run, Phase::Start);
    let events = stream::unfold(state, move |(mut run, phase)| {
        let (chunk, delta) = (chunk.clone(), delta);
        async move {
            let event = match phase {
                Phase::Start if kind == Kind::Chat => {
                    let first = json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null});
                    return Some((Ok(chunk(first, None)), (run, Phase::Body)));
                }
                Phase::Start | Phase::Body => loop {
                    match run.next().await {
                        Ok(Piece::Text(t)) if t.is_empty() => continue,
                        Ok(Piece::Text(t)) => break (chunk(delta(Some(t), None), None), Phase::Body),
                        Ok(Piece::End(reason)) => break (chunk(delta(None, Some(reason)), None), if usage { Phase::Usage } else { Phase::Done }),
                        Err(e) => break (Event::default().data(e.body().to_string()), Phase::Done),
                    }
                },
                Phase::Usage => {
                    let u = Usage::new(run.log.prompt, run.log.completion);
                    (chunk(Value::Null, Some(u)), Phase::Done)
                }
                Phase::Done => (Event::default().data("[DONE]"), Phase::Over),
                Phase::Over => return None,
            };
            Some((Ok(event.0), (run, event.1)))
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

async fn embeddings(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    let r = async {
        let req: EmbeddingRequest = api::parse(&body)?;
        let e = state.embedder.as_ref().filter(|e| e.name == req.model).ok_or_else(|| ApiError::unknown_model(&req.model))?;
        let texts = match req.input {
            Input::One(s) => vec![s],
            Input::Many(v) => v,
        };
        if texts.is_empty() {
            return Err(ApiError::invalid("`input` must not be empty.", Some("input")));
        }
        let base64 = match req.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => return Err(ApiError::invalid(format!("Unknown encoding_format `{other}` (float or base64)."), Some("encoding_format"))),
        };
        let (vectors, tokens) = embed(e, texts).await?;
        let data: Vec<Value> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let embedding = if base64 { json!(api::base64_f32(v)) } else { json!(v) };
                json!({"object": "embedding", "index": i, "embedding": embedding})
            })
            .collect();
        Ok(Json(json!({"object": "list", "data": data, "model": e.name, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})).into_response())
    };
    r.await.unwrap_or_else(IntoResponse::into_response)
}

/// Embeds `texts` on a blocking thread; also returns the tokens read.
async fn embed(e: &Embedder, texts: Vec<String>) -> Result<(Vec<Vec<f32>>, usize), ApiError> {
    let encoder = e.encoder.clone();
    let start = Instant::now();
    let result = tokio::task::spawn_blocking(move || {
        let mut enc = encoder.lock().map_err(|_| "the embedding model failed earlier".to_string())?;
        let tokens: usize = texts.iter().map(|t| enc.tokenizer.encode(t, enc.max_len).len()).sum();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        enc.embed(&refs).map(|v| (v, tokens)).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(ApiError::internal)?;
    tracing::info!("embeddings: {} inputs, {} tokens in {:.3} s", result.0.len(), result.1, start.elapsed().as_secs_f64());
    Ok(result)
}
