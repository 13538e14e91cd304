//! The OpenAI request and response bodies the server reads and writes, and its error body.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A request the server refuses, as OpenAI reports it: a status and
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into(), kind: "invalid_request_error", param, code: None }
    }

    /// The 404 of a model the server does not serve.
    pub fn unknown_model(model: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist or you do not have access to it."),
            kind: "invalid_request_error",
            param: Some("model"),
            code: Some("model_not_found"),
        }
    }

    /// The 400 of a prompt that leaves no room in the context.
    pub fn too_long(context: usize, tokens: usize) -> ApiError {
        ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(format!("This model's maximum context length is {context} tokens. However, your prompt resulted in {tokens} tokens."), Some("messages"))
        }
    }

    /// A 500 for a failure of the server's own (the model failed to run).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, message: message.into(), kind: "server_error", param: None, code: None }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn strings(&self) -> Vec<String> {
        match self {
            Stop::None => Vec::new(),
            Stop::One(s) => vec![s.clone()],
            Stop::Many(v) => v.clone(),
        }
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The sampling and length fields chat and completion requests share.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Generation {
    pub max_tokens: Option<i64>,
    /// The chat API's newer name for `max_tokens`.
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Stop,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<i64>,
}

/// A chat message's content: text, or a list of parts of which the text ones are read.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// One part of a message's content.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// A message of `messages`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: Option<Content>,
}

impl ChatMessage {
    /// The text of the content; parts other than text are refused.
    pub fn text(&self) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(s)) => Ok(s.clone()),
            Some(Content::Parts(parts)) => parts
                .iter()
                .map(|p| match (p.kind.as_str(), &p.text) {
                    ("text", Some(t)) => Ok(t.as_str()),
                    _ => Err(ApiError::invalid(format!("content parts of type `{}` are not supported (text only)", p.kind), Some("messages"))),
                })
                .collect(),
        }
    }
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub gen: Generation,
}

/// `prompt`: a string, or a list holding one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub gen: Generation,
}

/// `input` of an embeddings request.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Input {
    One(String),
    Many(Vec<String>),
}

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: Input,
    pub encoding_format: Option<String>,
}

/// `usage` of a response.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn new(prompt: usize, completion: usize) -> Usage {
        Usage { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
    }
}

/// Parses a request body, refusing malformed JSON or fields of the wrong type with a 400.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        let what = if e.is_syntax() || e.is_eof() { "could not parse the JSON body of your request" } else { "invalid request body" };
        ApiError::invalid(format!("We {what}: {e}"), None)
    })
}

/// `f32` values as OpenAI's `base64` encoding of embeddings: their little-endian bytes in
/// standard base64.
pub fn base64_f32(values: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16) | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8) | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_encodings() {
        // 1.0f32 = 00 00 80 3f; [1.0, -2.5] = 00 00 80 3f 00 00 20 c0.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.5]), "AACAPwAAIMA=");
        assert_eq!(base64_f32(&[]), "");
    }

    #[test]
    fn requests_parse_openai_shapes_and_refuse_malformed_ones() {
        let r: ChatRequest = parse(br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stop":"x","max_tokens":3}"#).unwrap();
        assert_eq!(r.messages[0].text().unwrap(), "ab");
        assert_eq!(r.gen.stop.strings(), vec!["x"]);
        assert_eq!(r.gen.max_tokens, Some(3));
        let err = parse::<ChatRequest>(b"{\"model\": ").unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("could not parse the JSON"), "{}", err.message);
        let err = parse::<ChatRequest>(br#"{"model":"m","messages":"hi"}"#).unwrap_err();
        assert!(err.message.contains("invalid request body"), "{}", err.message);
        let c: CompletionRequest = parse(br#"{"model":"m","prompt":["p"],"stop":["a","b"]}"#).unwrap();
        assert!(matches!(c.prompt, Prompt::Many(ref v) if v == &["p"]));
        assert_eq!(c.gen.stop.strings(), vec!["a", "b"]);
    }

    #[test]
    fn error_bodies_have_openais_fields() {
        let body = ApiError::unknown_model("gpt-x").body();
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["param"], "model");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
}
