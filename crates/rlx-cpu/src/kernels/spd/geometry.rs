//! AIRM geometry: Karcher means, the log and exp maps at a base point, parallel transport,
//! and the gradients of the maps and the transport (chain rule through `P^{±1/2}` and the
//! inner matrix function, each a Daleckii–Krein adjoint).

use super::mat::{prod, Mat};
use super::spectral::{Domain, Eig, Spectral};
use super::{mat, mats, per_slice, read, write};
use crate::view::{In, Out};

/// A base point `P` (SPD) with `S = P^{1/2}` and `T = P^{−1/2}`.
struct Base {
    e: Eig,
    s: Mat,
    t: Mat,
}

impl Base {
    fn new(label: &str, p: &Mat) -> Result<Base, String> {
        let e = Eig::of(label, p)?.require(Domain::Pd)?;
        Ok(Base { s: e.apply(Spectral::Sqrt(0.0))?, t: e.apply(Spectral::InvSqrt(0.0))?, e })
    }

    /// `T·Z·T`.
    fn whiten(&self, z: &Mat) -> Mat {
        prod(&[&self.t, z, &self.t])
    }

    /// `P̄` from the cotangents of `S` and `T`.
    fn adjoint(&self, sbar: &Mat, tbar: &Mat) -> Mat {
        self.e.adjoint(Spectral::Sqrt(0.0), sbar).add(&self.e.adjoint(Spectral::InvSqrt(0.0), tbar))
    }
}

/// Errors unless `m` is SPD, naming `label` and its offending eigenvalue.
fn require_spd(label: &str, m: &Mat) -> Result<(), String> {
    Eig::of(label, m)?.require(Domain::Pd).map(drop)
}

/// `Exp_P` or `Log_P`: `Y = S·f(C)·S`, `C = T·Z·T`.
#[derive(Clone, Copy)]
enum Map {
    Log,
    Exp,
}

impl Map {
    fn f(self) -> Spectral {
        match self {
            Map::Log => Spectral::Log(0.0),
            Map::Exp => Spectral::Exp,
        }
    }

    /// The name of the mapped operand.
    fn operand(self) -> &'static str {
        match self {
            Map::Log => "X",
            Map::Exp => "V",
        }
    }
}

/// What a map and its gradient share.
struct MapParts {
    base: Base,
    z: Mat,
    c: Eig,
    fc: Mat,
}

impl MapParts {
    fn new(map: Map, p: In, z: In) -> Result<MapParts, String> {
        let name = map.operand();
        let (p, z) = (mat("P", p)?, mat(name, z)?);
        let domain = match map {
            Map::Log => Domain::Pd,
            Map::Exp => Domain::Symmetric,
        };
        if domain == Domain::Pd {
            require_spd(name, &z)?;
        }
        let base = Base::new("P", &p)?;
        let c = Eig::of(format!("P^(-1/2)·{name}·P^(-1/2)"), &base.whiten(&z))?.require(domain)?;
        let fc = c.apply(map.f())?;
        Ok(MapParts { base, z, c, fc })
    }
}

fn map(m: Map, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let p = MapParts::new(m, ins[0], ins[1])?;
    write(&mut outs[0], &prod(&[&p.base.s, &p.fc, &p.base.s]).a);
    Ok(())
}

fn map_backward(m: Map, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let p = MapParts::new(m, ins[0], ins[1])?;
    let dy = mat("Ȳ", ins[2])?;
    let (s, t) = (&p.base.s, &p.base.t);
    let fbar = prod(&[s, &dy, s]);
    let sbar = prod(&[&dy, s, &p.fc]).add(&prod(&[&p.fc, s, &dy]));
    let cbar = p.c.adjoint(m.f(), &fbar);
    let zt = p.z.t();
    let tbar = prod(&[&cbar, t, &zt]).add(&prod(&[&zt, t, &cbar]));
    write(&mut outs[0], &p.base.adjoint(&sbar, &tbar).a);
    write(&mut outs[1], &prod(&[t, &cbar, t]).a);
    Ok(())
}

/// `SpdLogMap`: `(P, X)` → `P^{1/2}·logm(P^{−1/2}·X·P^{−1/2})·P^{1/2}`.
pub fn spd_log_map(ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    map(Map::Log, ins, outs)
}

/// `SpdExpMap`: `(P, V)` → `P^{1/2}·expm(P^{−1/2}·V·P^{−1/2})·P^{1/2}`.
pub fn spd_exp_map(ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    map(Map::Exp, ins, outs)
}

/// `SpdLogMapBackward`: `(P, X, Ȳ)` → `dP`, `dX`.
pub fn spd_log_map_backward(ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    map_backward(Map::Log, ins, outs)
}

/// `SpdExpMapBackward`: `(P, V, Ȳ)` → `dP`, `dV`.
pub fn spd_exp_map_backward(ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    map_backward(Map::Exp, ins, outs)
}

/// The transport matrix `E = S·K^{1/2}·T`, `K = T·Q·T`, with its pieces.
struct Transport {
    base: Base,
    q: Mat,
    k: Eig,
    r: Mat,
    e: Mat,
}

impl Transport {
    fn new(p: In, q: In) -> Result<Transport, String> {
        let (p, q) = (mat("P", p)?, mat("Q", q)?);
        require_spd("Q", &q)?;
        let base = Base::new("P", &p)?;
        let k = Eig::of("P^(-1/2)·Q·P^(-1/2)", &base.whiten(&q))?.require(Domain::Pd)?;
        let r = k.apply(Spectral::Sqrt(0.0))?;
        let e = prod(&[&base.s, &r, &base.t]);
        Ok(Transport { base, q, k, r, e })
    }
}

/// `SpdParallelTransport`: `(P, Q, V)` → `E·V·Eᵀ`, `E = P^{1/2}(P^{−1/2}QP^{−1/2})^{1/2}P^{−1/2}`.
pub fn spd_parallel_transport(ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let tr = Transport::new(ins[0], ins[1])?;
    let v = mat("V", ins[2])?;
    write(&mut outs[0], &prod(&[&tr.e, &v, &tr.e.t()]).a);
    Ok(())
}

/// `SpdParallelTransportBackward`: `(P, Q, V, Ȳ)` → `dP`, `dQ`, `dV`.
pub fn spd_parallel_transport_backward(ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    let tr = Transport::new(ins[0], ins[1])?;
    let (v, dy) = (mat("V", ins[2])?, mat("Ȳ", ins[3])?);
    let (s, t, r, e) = (&tr.base.s, &tr.base.t, &tr.r, &tr.e);
    let dv = prod(&[&e.t(), &dy, e]);
    let ebar = prod(&[&dy, e, &v.t()]).add(&prod(&[&dy.t(), e, &v]));
    let sbar = prod(&[&ebar, t, r]);
    let kbar = tr.k.adjoint(Spectral::Sqrt(0.0), &prod(&[s, &ebar, t]));
    let qt = tr.q.t();
    let tbar = prod(&[r, s, &ebar]).add(&prod(&[&kbar, t, &qt])).add(&prod(&[&qt, t, &kbar]));
    write(&mut outs[0], &tr.base.adjoint(&sbar, &tbar).a);
    write(&mut outs[1], &prod(&[t, &kbar, t]).a);
    write(&mut outs[2], &dv.a);
    Ok(())
}

/// `SpdKarcherMean`: the AIRM mean of `X [B,n,n]`.
pub fn spd_karcher_mean(iters: u32, tol: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    karcher(iters, tol, ins[0], None, &mut outs[0])
}

/// `SpdKarcherMeanWeighted`: the weighted AIRM barycentre of `X [B,n,n]` with weights `w [B]`.
pub fn spd_karcher_mean_weighted(iters: u32, tol: f32, ins: &[In], outs: &mut [Out]) -> Result<(), String> {
    karcher(iters, tol, ins[0], Some(ins[1]), &mut outs[0])
}

/// From the (weighted) arithmetic mean, at most `iters` steps `T = Σ w̄_i·logm(M^{−1/2}X_iM^{−1/2})`,
/// `M ← M^{1/2}·expm(T)·M^{1/2}`, stopping after the step where `‖T‖_F < tol`.
fn karcher(iters: u32, tol: f32, x: In, w: Option<In>, out: &mut Out) -> Result<(), String> {
    let xs = mats("X", x)?;
    let n = out.dims[0];
    per_slice(xs.len(), n, |i| require_spd(&format!("X[{i}]"), &xs[i]))?;
    let w = weights(xs.len(), w)?;
    let mut m = xs.iter().zip(&w).fold(Mat::zeros(n), |acc, (x, &wi)| acc.add(&x.scale(wi)));
    for _ in 0..iters {
        let base = Base::new("the Karcher iterate M", &m)?;
        let logs = per_slice(xs.len(), n, |i| {
            if w[i] == 0.0 {
                return Ok(Mat::zeros(n));
            }
            let c = Eig::of(format!("M^(-1/2)·X[{i}]·M^(-1/2)"), &base.whiten(&xs[i]))?.require(Domain::Pd)?;
            Ok(c.apply(Spectral::Log(0.0))?.scale(w[i]))
        })?;
        let step = logs.iter().fold(Mat::zeros(n), |acc, l| acc.add(l));
        let grow = Eig::of("the Karcher step T", &step)?.apply(Spectral::Exp)?;
        m = prod(&[&base.s, &grow, &base.s]).sym();
        if step.frobenius() < f64::from(tol) {
            break;
        }
    }
    write(out, &m.a);
    Ok(())
}

/// `w̄ = w/Σw` (uniform without `w`); weights must be ≥ 0 with a positive sum.
fn weights(count: usize, w: Option<In>) -> Result<Vec<f64>, String> {
    if count == 0 {
        return Err("X holds no matrices to average".into());
    }
    let Some(w) = w else { return Ok(vec![1.0 / count as f64; count]) };
    let w = read("w", w)?;
    if let Some(i) = w.iter().position(|&v| v < 0.0) {
        return Err(format!("weight w[{i}] is {} < 0", w[i]));
    }
    let sum: f64 = w.iter().sum();
    if sum <= 0.0 {
        return Err("the weights w sum to 0".into());
    }
    Ok(w.iter().map(|v| v / sum).collect())
}
