//! Chat templates: the Jinja template a model ships (GGUF `tokenizer.chat_template`, or
//! `chat_template` in a Hugging Face `tokenizer_config.json`) rendered by `minijinja` with
//! the globals `transformers`' `apply_chat_template` provides, and the tokens that end a turn.

use crate::bpe::BpeTokenizer;
use crate::error::{ModelError, Result};
use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// ChatML, the markup models without a template of their own get (as llama.cpp's fallback).
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Token texts that end an assistant turn in the common templates, besides the model's EOS.
const END_OF_TURN: &[&str] = &["<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|end_of_text|>", "</s>", "<|eom_id|>"];

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.into(), content: content.into() }
    }
}

/// A compiled chat template with the special-token texts it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// Whether this is the ChatML fallback rather than the model's own template.
    pub fallback: bool,
}

impl ChatTemplate {
    /// Compiles `source`; `bos` and `eos` are the texts the template sees as `bos_token` and
    /// `eos_token`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string()).map_err(|e| template_error("does not compile", &e))?;
        Ok(ChatTemplate { env, bos: bos.into(), eos: eos.into(), fallback: false })
    }

    /// The template `tok` carries, or ChatML when it has none (`fallback` set).
    pub fn for_tokenizer(tok: &BpeTokenizer) -> Result<ChatTemplate> {
        let text = |id: Option<u32>| id.map(|i| String::from_utf8_lossy(&tok.token_bytes(i, true)).into_owned()).unwrap_or_default();
        let (bos, eos) = (text(tok.bos), text(tok.eos));
        match &tok.chat_template {
            Some(source) => ChatTemplate::new(source, &bos, &eos),
            None => Ok(ChatTemplate { fallback: true, ..ChatTemplate::new(CHATML, &bos, &eos)? }),
        }
    }

    /// The conversation as the model reads it; with `add_generation_prompt`, ending where the
    /// assistant's reply starts.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let template = self.env.get_template("chat").map_err(|e| template_error("is missing", &e))?;
        let ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos,
            eos_token => self.eos,
            tools => Value::from(()),
        };
        template.render(ctx).map_err(|e| template_error("fails to render", &e))
    }
}

/// The template text of a Hugging Face `tokenizer_config.json`: its `chat_template` string,
/// or the entry named `default` of a list of named templates.
pub fn template_from_tokenizer_config(path: &Path) -> Result<Option<String>> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| ModelError::Unsupported(format!("{}: not JSON: {e}", path.display())))?;
    Ok(match v.get("chat_template") {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .or_else(|| named.first())
            .and_then(|t| t.get("template")?.as_str().map(str::to_string)),
        _ => None,
    })
}

/// The ids of a rendered conversation: special-token texts become their ids and no BOS is
/// added beyond what the template wrote (as `apply_chat_template` tokenizes).
pub fn encode_rendered(tok: &BpeTokenizer, text: &str) -> Vec<u32> {
    let mut ids = tok.encode(text, true);
    if tok.add_bos && tok.bos.is_some() && !ids.is_empty() {
        ids.remove(0);
    }
    ids
}

/// The tokens that end a turn: the EOS and the end-of-turn markers of common templates that
/// the vocabulary holds.
pub fn end_of_turn_tokens(tok: &BpeTokenizer) -> Vec<u32> {
    let mut ids: Vec<u32> = tok.eos.into_iter().collect();
    for t in END_OF_TURN.iter().filter_map(|t| tok.token_id(t)) {
        if !ids.contains(&t) {
            ids.push(t);
        }
    }
    ids
}

fn template_error(what: &str, e: &Error) -> ModelError {
    let mut msg = format!("chat template {what}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    ModelError::Unsupported(msg)
}

/// `raise_exception(msg)`: templates reject conversations they cannot render with it.
fn raise_exception(msg: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `tojson(value, indent=None)` as `transformers` defines it: Python's `json.dumps` with
/// non-ASCII kept, keys in their order (`", "` and `": "` between items, or one item a line
/// under `indent`).
fn tojson(value: Value, indent: Option<usize>, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent = indent.or(kwargs.get::<Option<usize>>("indent")?);
    kwargs.assert_all_used()?;
    let mut out = String::new();
    python_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// Writes `v` as Python's `json.dumps(v, ensure_ascii=False, indent=indent)` does.
fn python_json(v: &Value, indent: Option<usize>, depth: usize, out: &mut String) -> std::result::Result<(), Error> {
    use minijinja::value::ValueKind;
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    let (open, close, map) = match v.kind() {
        ValueKind::Map => ('{', '}', true),
        ValueKind::Seq | ValueKind::Iterable => ('[', ']', false),
        ValueKind::Undefined | ValueKind::None => {
            out.push_str("null");
            return Ok(());
        }
        ValueKind::String => {
            out.push_str(&quoted(v.as_str().unwrap_or_default()));
            return Ok(());
        }
        _ => {
            out.push_str(&v.to_string());
            return Ok(());
        }
    };
    out.push(open);
    let mut empty = true;
    for (i, item) in v.try_iter()?.enumerate() {
        empty = false;
        match indent {
            Some(n) => {
                out.push_str(if i == 0 { "\n" } else { ",\n" });
                out.push_str(&" ".repeat(n * (depth + 1)));
            }
            None if i > 0 => out.push_str(", "),
            None => {}
        }
        if map {
            out.push_str(&quoted(&item.to_string()));
            out.push_str(": ");
            python_json(&v.get_item(&item)?, indent, depth + 1, out)?;
        } else {
            python_json(&item, indent, depth + 1, out)?;
        }
    }
    if let (Some(n), false) = (indent, empty) {
        out.push('\n');
        out.push_str(&" ".repeat(n * depth));
    }
    out.push(close);
    Ok(())
}

/// `strftime_now(format)`: the current UTC time, for templates that print today's date
/// (`%Y`, `%m`, `%d`, `%H`, `%M`, `%S`, `%B`, `%b`, `%%`).
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    strftime(&format, secs)
}

/// `format` for the UTC time `secs` after the epoch.
fn strftime(format: &str, secs: u64) -> String {
    const MONTHS: [&str; 12] = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"];
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('H') => out.push_str(&format!("{:02}", rest / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rest / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rest % 60)),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('b') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// The proleptic Gregorian (year, month, day) of `days` after 1970-01-01 (Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_turns_and_the_generation_prompt() {
        let t = ChatTemplate::new(CHATML, "", "").unwrap();
        let got = t.render(&[Message::new("system", "Be brief."), Message::new("user", "Hi?")], true).unwrap();
        assert_eq!(got, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n");
        assert!(!t.render(&[Message::new("user", "Hi?")], false).unwrap().ends_with("assistant\n"));
    }

    #[test]
    fn llama3_style_templates_use_hf_globals_and_python_methods() {
        let src = "{{ bos_token }}{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m['role']) }}{% endif %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}{{ messages[0]['content'].strip().upper() | tojson }}";
        let t = ChatTemplate::new(src, "<|begin_of_text|>", "<|eot_id|>").unwrap();
        let got = t.render(&[Message::new("user", " hello ")], true).unwrap();
        assert_eq!(got, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n\"HELLO\"");
        let err = t.render(&[Message::new("tool", "x")], true).unwrap_err().to_string();
        assert!(err.contains("bad role tool"), "{err}");
    }

    #[test]
    fn tojson_writes_what_pythons_json_dumps_writes() {
        let t = ChatTemplate::new("{{ messages[0] | tojson }}|{{ [1, 'é<'] | tojson }}|{{ {'a': [1, 2], 'b': {}} | tojson(indent=2) }}", "", "").unwrap();
        let got = t.render(&[Message::new("user", "x")], false).unwrap();
        assert_eq!(got, "{\"role\": \"user\", \"content\": \"x\"}|[1, \"é<\"]|{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
    }

    #[test]
    fn a_template_that_does_not_compile_is_an_error() {
        let err = ChatTemplate::new("{% for m in messages %}", "", "").err().expect("an unclosed block").to_string();
        assert!(err.contains("does not compile"), "{err}");
    }

    #[test]
    fn strftime_formats_known_dates() {
        // 2024-02-29 13:05:09 UTC and 1970-01-01.
        assert_eq!(strftime("%d %B %Y, %H:%M:%S (%b) 100%%", 1_709_211_909), "29 February 2024, 13:05:09 (Feb) 100%");
        assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn tokenizer_config_templates_are_read_as_string_or_named_list() {
        let dir = std::env::temp_dir().join(format!("rlx-chat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer_config.json");
        std::fs::write(&path, r#"{"chat_template": "{{ x }}"}"#).unwrap();
        assert_eq!(template_from_tokenizer_config(&path).unwrap().as_deref(), Some("{{ x }}"));
        std::fs::write(&path, r#"{"chat_template": [{"name": "tool_use", "template": "a"}, {"name": "default", "template": "b"}]}"#).unwrap();
        assert_eq!(template_from_tokenizer_config(&path).unwrap().as_deref(), Some("b"));
        std::fs::write(&path, r#"{"eos_token": "</s>"}"#).unwrap();
        assert_eq!(template_from_tokenizer_config(&path).unwrap(), None);
        assert_eq!(template_from_tokenizer_config(&dir.join("absent.json")).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
