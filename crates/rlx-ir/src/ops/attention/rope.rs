//! Rotary position embeddings (OPS.md §7; `RopeBackward` §22).
//!
//! `Rope` reads sequence-major `x`: `[B, S, H·head_dim]`, `[B, S, H, head_dim]` or
//! `[S, H·head_dim]`; head-major `[B, H, S, D]` tensors are transposed first.

use super::{expect_dim, heads_times};
use crate::ops::{Arity, OpDef};
use crate::{Dim, Graph, TensorType, ValueId};
use serde::{Deserialize, Serialize};

/// How the rotated channels of a head are paired (the frequencies are the same for both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RopeStyle {
    /// Rotate-half: channel `i` pairs with `i + n_rot/2` (HF checkpoints, GGUF NEOX types).
    #[default]
    NeoX,
    /// Interleaved: channel `2i` pairs with `2i + 1` (GGUF NORM types such as `llama`).
    GptJ,
}

/// Rotates the first `n_rot` channels of every head by the position-dependent angles of the
/// `cos`/`sin` tables; channels `n_rot..head_dim` pass through. Inputs `(x, cos, sin)`.
///
/// Row `s` of a table of rank ≥ 2 is the `s`-th row over its non-unit leading axes (so HF's
/// `[S, head_dim]` and `[1, S, 1, D]` tables both work), of which the first `n_rot/2` entries
/// are read; a rank-1 table packs `n_rot/2` entries per row. Tables may be any float dtype. A
/// table with static rows serves a symbolic sequence length (the run time checks the bound).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    pub head_dim: usize,
    /// Rotated channels per head: even, at most `head_dim` (partial rotary below it).
    pub n_rot: usize,
    #[serde(default)]
    pub style: RopeStyle,
}

/// The inverse rotation of `Rope` (same tables with `sin` negated), giving `dx` from `dy`;
/// inputs `(dy, cos, sin)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RopeBackward {
    pub head_dim: usize,
    pub n_rot: usize,
    #[serde(default)]
    pub style: RopeStyle,
}

/// SAM2's axial 2-D RoPE on `x [B, S, num_heads·head_dim]` with `S = end_x·end_y·repeat_factor`:
/// token `t` sits at grid cell `p = t mod (end_x·end_y)` (the copies are whole consecutive
/// grids); in each head, channel pairs `(2c, 2c+1)` of `[0, D/2)` rotate by `(p mod end_x)·f_c`
/// and those of `[D/2, D)` by `⌊p/end_x⌋·f_c`, with `f_c = theta^(−4c/D)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AxialRope2d {
    pub end_x: usize,
    pub end_y: usize,
    /// Per-head width `D`, a multiple of 4.
    pub head_dim: usize,
    pub num_heads: usize,
    pub theta: f32,
    pub repeat_factor: usize,
}

/// Checks `x` (named `name`) and the tables of `Rope`/`RopeBackward`.
fn check_rope(head_dim: usize, n_rot: usize, name: &str, inputs: &[TensorType]) -> Result<(), String> {
    let (x, cos, sin) = (&inputs[0], &inputs[1], &inputs[2]);
    if head_dim == 0 || n_rot == 0 || n_rot % 2 != 0 || n_rot > head_dim {
        return Err(format!("n_rot {n_rot} must be even, at least 2 and at most head_dim {head_dim}"));
    }
    if !x.dtype.is_float() {
        return Err(format!("{name} {x} must be a float tensor"));
    }
    let rank = x.rank();
    match rank {
        4 => expect_dim(name, x, 3, &Dim::Static(head_dim), "head_dim")?,
        2 | 3 => {
            let width = x.static_dim(rank - 1)?;
            if width % head_dim != 0 {
                return Err(format!("the last dim of {name} {x} is not a multiple of head_dim {head_dim}"));
            }
        }
        _ => return Err(format!("{name} {x} must be [B, S, H·D], [B, S, H, D] or [S, H·D]")),
    }
    if sin != cos {
        return Err(format!("sin {sin} must have the type of cos {cos}"));
    }
    if !cos.dtype.is_float() {
        return Err(format!("cos {cos} must be a float tensor"));
    }
    // The sequence axis is 1 in both batched layouts (sequence-major), 0 in `[S, H·D]`.
    let seq = if rank == 2 { 0 } else { 1 };
    check_table(cos, n_rot / 2, x.shape.dim(seq), name, x)
}

/// Checks that `table` has rows of at least `half` entries, one for each of the `s` positions.
fn check_table(table: &TensorType, half: usize, s: &Dim, name: &str, x: &TensorType) -> Result<(), String> {
    let rows: Vec<Dim> = match table.shape.dims().split_last() {
        None => return Err(format!("cos {table} must have rank at least 1")),
        Some((_, [])) => vec![Dim::Static(table.static_dim(0)? / half)],
        Some((_, leading)) => {
            let width = table.static_dim(table.rank() - 1)?;
            if width < half {
                return Err(format!("rows of cos {table} hold {width} entries; n_rot/2 = {half} are read"));
            }
            leading.iter().filter(|d| **d != Dim::Static(1)).cloned().collect()
        }
    };
    let static_rows: Option<usize> = rows.iter().try_fold(1usize, |acc, d| Some(acc.saturating_mul(d.as_static()?)));
    let covered = match (static_rows, s) {
        (Some(n), Dim::Static(need)) => n >= *need,
        (Some(_), Dim::Sym(_)) => true,
        (None, _) => rows.len() == 1 && rows[0] == *s,
    };
    if !covered {
        return Err(format!("cos {table} does not have a row for each of the {s} positions of {name} {x}"));
    }
    Ok(())
}

impl OpDef for Rope {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_rope(self.head_dim, self.n_rot, "x", inputs)?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for RopeBackward {
    fn arity(&self) -> Arity {
        Arity::Exact(3)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        check_rope(self.head_dim, self.n_rot, "the upstream gradient", inputs)?;
        Ok(vec![inputs[0].clone()])
    }
}

impl OpDef for AxialRope2d {
    fn arity(&self) -> Arity {
        Arity::Exact(1)
    }
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>, String> {
        let x = &inputs[0];
        if self.head_dim == 0 || self.head_dim % 4 != 0 {
            return Err(format!("head_dim {} must be a positive multiple of 4", self.head_dim));
        }
        if self.num_heads == 0 || self.end_x == 0 || self.end_y == 0 || self.repeat_factor == 0 {
            return Err(format!(
                "num_heads {}, end_x {}, end_y {} and repeat_factor {} must be at least 1",
                self.num_heads, self.end_x, self.end_y, self.repeat_factor
            ));
        }
        if !(self.theta.is_finite() && self.theta > 0.0) {
            return Err(format!("theta must be finite and positive, got {}", self.theta));
        }
        if !x.dtype.is_float() || x.rank() != 3 {
            return Err(format!("x {x} must be a float [B, S, H·D] tensor"));
        }
        let tokens = heads_times(self.end_x, self.end_y).and_then(|g| heads_times(g, self.repeat_factor))?;
        expect_dim("x", x, 1, &Dim::Static(tokens), "end_x × end_y × repeat_factor")?;
        let width = heads_times(self.num_heads, self.head_dim)?;
        expect_dim("x", x, 2, &Dim::Static(width), "num_heads × head_dim")?;
        Ok(vec![x.clone()])
    }
}

/// Builders for the rotary embeddings.
impl Graph {
    /// Rotary embedding of sequence-major `x` with tables `cos`, `sin`.
    pub fn rope(&mut self, attrs: Rope, x: ValueId, cos: ValueId, sin: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x, cos, sin])
    }

    /// `dx` of `Rope` for the upstream `dy`.
    pub fn rope_backward(&mut self, attrs: RopeBackward, dy: ValueId, cos: ValueId, sin: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[dy, cos, sin])
    }

    /// SAM2 axial 2-D rotary embedding of `x [B, S, H·D]`.
    pub fn axial_rope_2d(&mut self, attrs: AxialRope2d, x: ValueId) -> crate::Result<ValueId> {
        self.add1(attrs, &[x])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Shape};

    fn ty(dims: &[&str]) -> TensorType {
        let dims = dims.iter().map(|d| d.parse::<usize>().map(Dim::Static).unwrap_or_else(|_| Dim::sym(d)));
        TensorType::new(DType::F32, Shape(dims.collect()))
    }

    fn neox(head_dim: usize, n_rot: usize) -> Rope {
        Rope { head_dim, n_rot, style: RopeStyle::NeoX }
    }

    #[test]
    fn tables_cover_the_sequence() {
        let mut g = Graph::new();
        let x = g.input("x", ty(&["B", "S", "512"]));
        let hf = g.input("cos", ty(&["S", "64"]));
        assert!(g.rope(neox(64, 64), x, hf, hf).is_ok());
        let full = g.param("full", ty(&["4096", "32"]));
        assert!(g.rope(neox(64, 64), x, full, full).is_ok());
        let short = g.param("short", ty(&["4096", "16"]));
        let e = g.rope(neox(64, 64), x, short, short).unwrap_err().to_string();
        assert!(e.contains("rows of cos f32[4096, 16] hold 16 entries; n_rot/2 = 32 are read"), "{e}");
        let other = g.input("other", ty(&["T", "32"]));
        let e = g.rope(neox(64, 64), x, other, other).unwrap_err().to_string();
        assert!(e.contains("does not have a row for each of the S positions of x"), "{e}");
        let x4 = g.input("x4", ty(&["1", "7", "8", "64"]));
        let flat = g.param("flat", ty(&["112"]));
        assert!(g.rope(neox(64, 32), x4, flat, flat).is_ok());
        let e = g.rope(neox(64, 64), x4, flat, flat).unwrap_err().to_string();
        assert!(e.contains("for each of the 7 positions"), "{e}");
    }

    #[test]
    fn rotary_attributes_are_checked() {
        let mut g = Graph::new();
        let x = g.input("x", ty(&["B", "S", "96"]));
        let t = g.input("t", ty(&["S", "32"]));
        assert!(g.rope(neox(64, 64), x, t, t).unwrap_err().to_string().contains("not a multiple of head_dim 64"));
        assert!(g.rope(neox(32, 7), x, t, t).unwrap_err().to_string().contains("must be even"));
        let half = g.input("h", TensorType::new(DType::F16, ty(&["S", "32"]).shape));
        assert!(g.rope(neox(32, 32), x, t, half).unwrap_err().to_string().contains("sin f16[S, 32] must have the type of cos f32[S, 32]"));
        let back = RopeBackward { head_dim: 32, n_rot: 16, style: RopeStyle::GptJ };
        let dx = g.rope_backward(back, x, t, t).unwrap();
        assert_eq!(g.ty(dx), g.ty(x));
    }

    #[test]
    fn axial_rope_needs_the_whole_grid() {
        let mut g = Graph::new();
        let attrs = AxialRope2d { end_x: 32, end_y: 32, head_dim: 64, num_heads: 1, theta: 10000.0, repeat_factor: 2 };
        let x = g.input("x", ty(&["B", "2048", "64"]));
        assert!(g.axial_rope_2d(attrs.clone(), x).is_ok());
        let y = g.input("y", ty(&["B", "1024", "64"]));
        let e = g.axial_rope_2d(attrs, y).unwrap_err().to_string();
        assert!(e.contains("axis 1 of x f32[B, 1024, 64] is 1024, expected 2048 (end_x × end_y × repeat_factor)"), "{e}");
    }
}
