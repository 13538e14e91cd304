//! The decode loop: one thread owns the [`Batcher`] (the compiled model and its KV pool),
//! takes requests from a channel between steps and sends each sequence's tokens to its
//! request's channel. A closed channel (the client went away) cancels the sequence.

use rlx::models::llama::batch::{Batcher, Finish, SeqId, SeqRequest};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// What a request hears from the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Queued (the first message when the request is valid).
    Accepted,
    /// The request cannot be served (the first and last message).
    Refused(String),
    Token(u32),
    Done(Finish),
    /// The model failed while running the sequence (the last message).
    Failed(String),
}

/// A request for the engine.
struct Job {
    req: SeqRequest,
    out: UnboundedSender<Out>,
}

/// The handle requests reach the engine through; the engine stops when every handle is gone.
#[derive(Clone)]
pub struct Engine {
    tx: mpsc::Sender<Job>,
    load: Arc<Load>,
}

/// Sequences queued and running, as of the engine's last step.
#[derive(Debug, Default)]
pub struct Load {
    pub queued: AtomicUsize,
    pub running: AtomicUsize,
}

/// Counters the engine keeps, for the shutdown summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct EngineStats {
    pub steps: u64,
    pub decode_steps: u64,
    /// Sequences summed over decode steps (over `decode_steps`: the mean batch).
    pub decode_sequences: u64,
    pub prefill_tokens: u64,
}

impl Engine {
    /// Starts the engine thread over `batcher`; the thread returns its counters when the
    /// last handle is dropped.
    pub fn start(batcher: Batcher) -> std::io::Result<(Engine, std::thread::JoinHandle<EngineStats>)> {
        let (tx, rx) = mpsc::channel();
        let load = Arc::new(Load::default());
        let shared = load.clone();
        let thread = std::thread::Builder::new().name("rlx-engine".into()).spawn(move || run(batcher, rx, &shared))?;
        Ok((Engine { tx, load }, thread))
    }

    /// (queued, running) sequences.
    pub fn load(&self) -> (usize, usize) {
        (self.load.queued.load(Ordering::Relaxed), self.load.running.load(Ordering::Relaxed))
    }

    /// Queues `req`; its messages come on `out`. False when the engine has stopped.
    pub fn submit(&self, req: SeqRequest, out: UnboundedSender<Out>) -> bool {
        self.tx.send(Job { req, out }).is_ok()
    }
}

fn run(mut batcher: Batcher, rx: mpsc::Receiver<Job>, load: &Load) -> EngineStats {
    let mut outs: HashMap<SeqId, UnboundedSender<Out>> = HashMap::new();
    let mut stats = EngineStats::default();
    loop {
        let (queued, running) = batcher.pending();
        load.queued.store(queued, Ordering::Relaxed);
        load.running.store(running, Ordering::Relaxed);
        let first = if batcher.is_idle() {
            match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => return stats,
            }
        } else {
            None
        };
        for job in first.into_iter().chain(rx.try_iter()) {
            match batcher.submit(job.req) {
                Ok(id) => {
                    if job.out.send(Out::Accepted).is_ok() {
                        outs.insert(id, job.out);
                    } else {
                        batcher.cancel(id);
                    }
                }
                Err(e) => {
                    let _ = job.out.send(Out::Refused(e.to_string()));
                }
            }
        }
        outs.retain(|id, out| {
            let open = !out.is_closed();
            if !open {
                batcher.cancel(*id);
            }
            open
        });
        let started = Instant::now();
        match batcher.step() {
            Ok((events, step)) => {
                stats.steps += 1;
                stats.prefill_tokens += step.prompt_tokens as u64;
                if step.decoded > 0 {
                    stats.decode_steps += 1;
                    stats.decode_sequences += step.decoded as u64;
                }
                tracing::trace!(?step, ms = started.elapsed().as_secs_f64() * 1e3, "step");
                for e in events {
                    let Some(out) = outs.get(&e.id) else { continue };
                    let sent = e.token.is_none_or(|t| out.send(Out::Token(t)).is_ok());
                    let sent = sent && e.finish.is_none_or(|f| out.send(Out::Done(f)).is_ok());
                    if e.finish.is_some() {
                        outs.remove(&e.id);
                    } else if !sent {
                        batcher.cancel(e.id);
                        outs.remove(&e.id);
                    }
                }
            }
            Err(e) => {
                tracing::error!("decode step failed: {e}");
                for (id, out) in outs.drain() {
                    batcher.cancel(id);
                    let _ = out.send(Out::Failed(e.to_string()));
                }
            }
        }
    }
}
