//! The server over HTTP on loopback, with a tiny random Llama (the tokenizer of the repo's
//! tiny HF fixture, random weights, a long context): concurrent streams equal each request
//! alone, a client that goes away cancels its sequence, and bad requests get 4xx bodies.

use rlx::models::bpe::BpeTokenizer;
use rlx::models::llama::{LlamaConfig, Weights};
use rlx::Session;
use rlx_serve::{start_llm, AppState, LlmOptions};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

const MODEL: &str = "tiny";

/// A server on a free port, its engine on a tiny random Llama of `context` positions.
fn start(context: usize) -> (SocketAddr, tokio::sync::oneshot::Sender<()>, std::thread::JoinHandle<()>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/models/hf-tiny/llama");
    let tokenizer = BpeTokenizer::from_tokenizer_json(&root.join("tokenizer.json")).unwrap();
    let config = LlamaConfig { vocab: tokenizer.vocab_size(), d_model: 64, layers: 2, heads: 4, kv_heads: 2, head_dim: 16, d_ff: 128, rope_dim: 16, context, ..LlamaConfig::llama_3_2_1b() };
    let weights = Weights::random(&config, 17, None);
    let session = Session::new(rlx::Device::Cpu).unwrap();
    let (llm, _engine) = start_llm(MODEL.into(), tokenizer, &config, weights, &LlmOptions { context: None, kv_bytes: 8 << 20, ..LlmOptions::default() }, &session).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            rlx_serve::serve_on(listener, AppState::new(Some(llm), None), async move {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    (addr_rx.recv().unwrap(), stop_tx, server)
}

/// Sends a request and returns the stream positioned after the headers, with the status.
fn send(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, BufReader<TcpStream>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let code = status.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    (code, r)
}

/// The status and JSON body of a request (chunked bodies de-chunked).
fn call(addr: SocketAddr, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let (code, mut r) = send(addr, method, path, body.to_string().as_bytes());
    let mut raw = String::new();
    r.read_to_string(&mut raw).unwrap();
    let start = raw.find('{').unwrap_or(0);
    let end = raw.rfind('}').map_or(raw.len(), |e| e + 1);
    (code, serde_json::from_str(&raw[start..end]).unwrap_or(Value::Null))
}

/// The text of a streamed completion, and its finish reason.
fn streamed(addr: SocketAddr, body: &Value) -> (String, String) {
    let (code, r) = send(addr, "POST", "/v1/completions", body.to_string().as_bytes());
    assert_eq!(code, 200);
    let (mut text, mut finish) = (String::new(), String::new());
    for line in r.lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            return (text, finish);
        }
        let v: Value = serde_json::from_str(data).unwrap();
        text.push_str(v["choices"][0]["text"].as_str().unwrap_or(""));
        if let Some(f) = v["choices"][0]["finish_reason"].as_str() {
            finish = f.into();
        }
    }
    panic!("the stream ended without [DONE]");
}

fn running(addr: SocketAddr) -> u64 {
    call(addr, "GET", "/health", &Value::Null).1["running"].as_u64().unwrap()
}

#[test]
fn concurrent_streams_equal_each_request_alone_and_disconnects_cancel() {
    let (addr, stop, server) = start(4096);
    let prompts = ["one two", "three", "four five six", "seven", "eight nine", "ten eleven twelve"];
    let body = |p: &str| json!({"model": MODEL, "prompt": p, "max_tokens": 24, "temperature": 0, "stream": true});
    let alone: Vec<(String, String)> = prompts.iter().map(|p| streamed(addr, &body(p))).collect();
    let together: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = prompts.iter().map(|p| s.spawn(move || streamed(addr, &body(p)))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(together, alone);
    assert!(alone.iter().all(|(t, f)| !t.is_empty() && f == "length"), "{alone:?}");
    let whole = call(addr, "POST", "/v1/completions", &json!({"model": MODEL, "prompt": prompts[0], "max_tokens": 24, "temperature": 0}));
    assert_eq!(whole.1["choices"][0]["text"].as_str().unwrap(), alone[0].0);
    assert_eq!(whole.1["usage"]["completion_tokens"], 24);

    // A long generation whose client reads one event and hangs up.
    let (code, mut r) = send(addr, "POST", "/v1/completions", json!({"model": MODEL, "prompt": "go", "max_tokens": 4000, "temperature": 0, "stream": true}).to_string().as_bytes());
    assert_eq!(code, 200);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let t = Instant::now();
    while running(addr) != 1 {
        assert!(t.elapsed() < Duration::from_secs(20), "the long sequence does not run");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(r);
    let t = Instant::now();
    while running(addr) != 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the sequence was not cancelled");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.send(()).unwrap();
    server.join().unwrap();
}

#[test]
fn bad_requests_get_openai_error_bodies_and_the_server_goes_on() {
    let (addr, stop, server) = start(64);
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"model": "nope", "prompt": "x"}), 404, "model_not_found"),
        (json!({"model": MODEL, "prompt": "x", "max_tokens": -1}), 400, "invalid_request_error"),
        (json!({"model": MODEL, "prompt": "x", "max_tokens": 0}), 400, "invalid_request_error"),
        (json!({"model": MODEL, "prompt": "word ".repeat(100)}), 400, "context_length_exceeded"),
        (json!({"model": MODEL, "prompt": "x", "top_p": 0}), 400, "invalid_request_error"),
        (json!({"model": MODEL, "prompt": "x", "n": 2}), 400, "invalid_request_error"),
        (json!({"model": MODEL, "prompt": ["a", "b"]}), 400, "invalid_request_error"),
        (json!({"model": MODEL, "prompt": 5}), 400, "invalid_request_error"),
        (json!({"prompt": "x"}), 400, "invalid_request_error"),
    ];
    for (body, status, kind) in cases {
        let (code, reply) = call(addr, "POST", "/v1/completions", &body);
        assert_eq!(code, status, "{body}: {reply}");
        let e = &reply["error"];
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}: {reply}");
        assert!(e["code"] == kind || e["type"] == kind, "{body}: {reply}");
    }
    for raw in [&b"{\"model\": "[..], b"\xff\xfe", b"[]", b""] {
        let (code, mut r) = send(addr, "POST", "/v1/chat/completions", raw);
        let mut text = String::new();
        r.read_to_string(&mut text).unwrap();
        assert_eq!(code, 400, "{raw:?}: {text}");
        assert!(text.contains("invalid_request_error"), "{raw:?}: {text}");
    }
    let (code, reply) = call(addr, "POST", "/v1/chat/completions", &json!({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}));
    assert_eq!(code, 400, "{reply}");
    let (code, reply) = call(addr, "POST", "/v1/embeddings", &json!({"model": MODEL, "input": "x"}));
    assert_eq!((code, &reply["error"]["code"]), (404, &json!("model_not_found")));
    let (code, reply) = call(addr, "GET", "/v1/nothing", &Value::Null);
    assert_eq!(code, 404, "{reply}");
    let (code, reply) = call(addr, "POST", "/v1/chat/completions", &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "temperature": 0}));
    assert_eq!(code, 200, "{reply}");
    assert_eq!(reply["usage"]["completion_tokens"].as_u64().unwrap() + reply["usage"]["prompt_tokens"].as_u64().unwrap(), reply["usage"]["total_tokens"].as_u64().unwrap());
    let models = call(addr, "GET", "/v1/models", &Value::Null).1;
    assert_eq!(models["data"][0]["id"], MODEL);
    stop.send(()).unwrap();
    server.join().unwrap();
}
