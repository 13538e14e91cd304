//! `rlx chat`: an interactive conversation with a Llama-family model. Each turn is rendered
//! with the whole history through the model's chat template; the KV cache keeps the tokens
//! the new rendering shares with the last, so a turn feeds only what is new. The reply
//! streams as it is sampled and ends at an end-of-turn token.

use crate::generate::{load, Printer};
use rlx::models::chat::{encode_rendered, end_of_turn_tokens, ChatTemplate, Message};
use rlx::models::llama::{Generator, Llama, Sampling};
use rlx::{Device, Session};
use std::error::Error;
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// How to chat.
pub struct ChatOptions {
    pub model: PathBuf,
    /// A system message opening the conversation.
    pub system: Option<String>,
    /// Most tokens of one reply.
    pub n: usize,
    /// Positions of the conversation (the KV cache); the model's own context when larger.
    pub context: usize,
    pub sampling: Sampling,
    pub device: Device,
}

/// The length of the common prefix of `a` and `b`.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

pub fn run(o: &ChatOptions) -> Result<(), Box<dyn Error>> {
    let (tok, config, weights) = load(&o.model)?;
    let template = ChatTemplate::for_tokenizer(&tok)?;
    let stops = end_of_turn_tokens(&tok);
    let capacity = o.context.min(config.context).max(2);
    let model = Llama::build(&config, &weights, capacity)?;
    drop(weights);
    let session = Session::new(o.device)?;
    let mut gen = Generator::new(model, &session)?;
    let opening: Vec<Message> = o.system.iter().map(|s| Message::new("system", s)).collect();
    let mut history = opening.clone();
    // The tokens whose keys and values the cache holds, in order.
    let mut cached: Vec<u32> = Vec::new();
    let fallback = if template.fallback { " (no chat template in the model: ChatML)" } else { "" };
    eprintln!("chatting with {}{fallback}; /reset starts over, /exit or Ctrl-D leaves", o.model.display());
    let stdin = std::io::stdin();
    let mut turn = 0u64;
    loop {
        print!("\n> ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            println!();
            return Ok(());
        }
        let line = line.trim_end_matches(['\n', '\r']);
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => return Ok(()),
            "/reset" => {
                history = opening.clone();
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(Message::new("user", line));
        let ids = encode_rendered(&tok, &template.render(&history, true)?);
        let keep = gen.rewind(common_prefix(&cached, &ids).min(ids.len() - 1));
        cached.truncate(keep);
        let room = capacity.saturating_sub(ids.len());
        if room == 0 {
            history.pop();
            eprintln!("(the conversation fills the context of {capacity} tokens: /reset to start over)");
            continue;
        }
        let mut printer = Printer::default();
        let sampling = Sampling { seed: o.sampling.seed.wrapping_add(turn), ..o.sampling };
        turn += 1;
        let (out, _) = gen.generate(&ids[keep..], o.n.min(room), sampling, &stops, |t| printer.push(&tok.token_bytes(t, false)))?;
        printer.finish();
        cached.extend_from_slice(&ids[keep..]);
        cached.extend_from_slice(&out[..out.len().saturating_sub(1)]);
        let reply: Vec<u32> = out.iter().copied().filter(|t| !stops.contains(t)).collect();
        history.push(Message::new("assistant", &tok.decode(&reply, false)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefixes() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
    }
}
