//! What a Llama-family member changes from plain Llama (Qwen2 biases, Qwen3 QK-norm, Gemma3's
//! GeGLU, norms and sliding windows), and the rotary frequencies of each rope scaling.

use rlx_ir::ops::elementwise::ActivationKind;

/// The switches that distinguish family members; `Variant::default()` is plain Llama.
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// How rope frequencies are rescaled for a longer context (global layers).
    pub rope_scaling: RopeScaling,
    /// Biases on the query, key and value projections (Qwen2, HF `attention_bias`).
    pub qkv_bias: bool,
    /// A bias on the attention output projection (HF Llama/Gemma `attention_bias`).
    pub o_bias: bool,
    /// Biases on the three feed-forward projections (HF Llama `mlp_bias`).
    pub ffn_bias: bool,
    /// An RMSNorm over each query and key head before the rotation (Qwen3, Gemma3).
    pub qk_norm: bool,
    /// Stored RMSNorm gains are offsets from 1, the graph uses `1 + w` (HF Gemma checkpoints;
    /// llama.cpp's GGUF converter already added the 1).
    pub norm_plus_one: bool,
    /// RMSNorms on the attention and feed-forward outputs before their residual adds (Gemma3).
    pub post_norms: bool,
    /// The feed-forward gate's activation: SiLU (SwiGLU) or tanh GELU (Gemma's GeGLU).
    pub ffn_act: ActivationKind,
    /// Token embeddings are multiplied by this (Gemma: √d_model).
    pub embed_scale: Option<f32>,
    /// Attention logit scale; `1/√head_dim` when `None` (Gemma3: `query_pre_attn_scalar^-½`).
    pub attn_scale: Option<f32>,
    /// `c·tanh(s/c)` on attention logits (`attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// `c·tanh(z/c)` on the output logits (`final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    /// Layers that attend to a window of recent tokens only (Gemma3).
    pub sliding: Option<SlidingWindow>,
    /// A mixture of experts in place of every layer's feed-forward (Qwen3-MoE).
    pub moe: Option<Moe>,
    /// Follow llama.cpp's rope arithmetic (f32 angles by repeated products) instead of f64
    /// angles: set for GGUF files, whose reference implementation is llama.cpp. (Its f16 KV
    /// cache, built as graph ops, halved decode speed and moved no logit closer to llama.cpp's.)
    pub llama_cpp_numerics: bool,
}

impl Default for Variant {
    fn default() -> Variant {
        Variant {
            rope_scaling: RopeScaling::None,
            qkv_bias: false,
            o_bias: false,
            ffn_bias: false,
            qk_norm: false,
            norm_plus_one: false,
            post_norms: false,
            ffn_act: ActivationKind::Silu,
            embed_scale: None,
            attn_scale: None,
            attn_softcap: None,
            final_softcap: None,
            sliding: None,
            moe: None,
            llama_cpp_numerics: false,
        }
    }
}

/// A mixture-of-experts feed-forward as llama.cpp's Qwen3-MoE runs it: a router
/// (`ffn_gate_inp`) scores the experts, softmax, the `used` best are kept and their weights
/// renormalised to sum to 1, and the chosen experts' SwiGLU outputs (`ffn_{gate,up,down}_exps`)
/// are summed so weighted.
#[derive(Clone, Debug, PartialEq)]
pub struct Moe {
    pub experts: usize,
    /// Experts each token runs (`expert_used_count`).
    pub used: usize,
    /// Hidden width of one expert (`expert_feed_forward_length`).
    pub d_ff: usize,
}

/// Sliding-window attention on some layers.
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingWindow {
    /// Keys `q − window < k ≤ q` are visible (HF `sliding_window`).
    pub window: usize,
    /// Per layer: whether it slides.
    pub layers: Vec<bool>,
    /// The sliding layers' own unscaled rope base (Gemma3 `rope_local_base_freq`); `None`
    /// when they share the global layers' rope.
    pub rope_base: Option<f64>,
}

/// HF `rope_scaling` / `rope_parameters` types that change the frequencies.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (every frequency divided by it).
    Linear { factor: f64 },
    /// Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth ramp between.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_context: f64 },
    /// YaRN: per-frequency blend of interpolation and extrapolation, cos/sin scaled by
    /// `attention_factor`.
    Yarn { factor: f64, original_context: f64, beta_fast: f64, beta_slow: f64, attention_factor: f64, truncate: bool },
}

/// The `n_rot/2` rotary inverse frequencies for `base` under `scaling`, and the factor every
/// cos/sin is multiplied by (YaRN's attention factor, else 1). Follows HF's
/// `modeling_rope_utils` definitions.
pub fn inverse_frequencies(base: f64, n_rot: usize, scaling: &RopeScaling) -> (Vec<f64>, f64) {
    let plain: Vec<f64> = (0..n_rot / 2).map(|i| base.powf(-2.0 * i as f64 / n_rot as f64)).collect();
    match *scaling {
        RopeScaling::None => (plain, 1.0),
        RopeScaling::Linear { factor } => (plain.iter().map(|f| f / factor).collect(), 1.0),
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
            let low_wavelen = original_context / low_freq_factor;
            let high_wavelen = original_context / high_freq_factor;
            let freqs = plain
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect();
            (freqs, 1.0)
        }
        RopeScaling::Yarn { factor, original_context, beta_fast, beta_slow, attention_factor, truncate } => {
            let dim = n_rot as f64;
            let correction = |rotations: f64| dim * (original_context / (rotations * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
            let (mut low, mut high) = (correction(beta_fast), correction(beta_slow));
            if truncate {
                (low, high) = (low.floor(), high.ceil());
            }
            let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
            if low == high {
                high += 0.001;
            }
            let freqs = plain
                .iter()
                .enumerate()
                .map(|(i, &f)| {
                    let extrapolate = 1.0 - ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                    f / factor * (1.0 - extrapolate) + f * extrapolate
                })
                .collect();
            (freqs, attention_factor)
        }
    }
}

/// YaRN's default attention factor for `factor` (`0.1·ln(factor) + 1`, 1 below 1), with
/// DeepSeek's `mscale` / `mscale_all_dim` ratio when both are given.
pub fn yarn_attention_factor(factor: f64, mscale: Option<f64>, mscale_all_dim: Option<f64>) -> f64 {
    let m = |scale: f64, m: f64| if scale <= 1.0 { 1.0 } else { 0.1 * m * scale.ln() + 1.0 };
    match (mscale, mscale_all_dim) {
        (Some(a), Some(b)) if a != 0.0 && b != 0.0 => m(factor, a) / m(factor, b),
        _ => m(factor, 1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_keeps_high_divides_low_and_ramps_between() {
        let s = RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_context: 8192.0 };
        let (plain, _) = inverse_frequencies(500_000.0, 128, &RopeScaling::None);
        let (scaled, af) = inverse_frequencies(500_000.0, 128, &s);
        assert_eq!(af, 1.0);
        assert_eq!(scaled[0], plain[0]);
        assert!((scaled[63] - plain[63] / 8.0).abs() < 1e-18);
        let ramp = (0..64).filter(|&i| scaled[i] != plain[i] && (scaled[i] - plain[i] / 8.0).abs() > 1e-18).count();
        assert!(ramp > 0, "some frequencies lie on the ramp");
    }

    #[test]
    fn yarn_blends_toward_interpolation_at_low_frequencies() {
        let s = RopeScaling::Yarn { factor: 4.0, original_context: 4096.0, beta_fast: 32.0, beta_slow: 1.0, attention_factor: 1.2, truncate: true };
        let (plain, _) = inverse_frequencies(10_000.0, 64, &RopeScaling::None);
        let (scaled, af) = inverse_frequencies(10_000.0, 64, &s);
        assert_eq!(af, 1.2);
        assert_eq!(scaled[0], plain[0]);
        assert!((scaled[31] - plain[31] / 4.0).abs() < 1e-15);
        assert!((yarn_attention_factor(4.0, None, None) - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
    }
}
