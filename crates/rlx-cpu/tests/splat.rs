//! Gaussian splat kernels on bad data: every data-dependent failure is an `Err` naming the op
//! and the offending value, never a panic or a silent wrong image. Also: `Render` equals
//! `Rasterize(Prepare(·))` on a scene big enough to take the threaded path.

mod common;

use common::{assert_close, randn, session};
use rlx_ir::ops::splat::{GaussianSplatPrepare, GaussianSplatRasterize, GaussianSplatRender, GaussianSplatRenderBackward};
use rlx_ir::{DType, Graph, TensorType, ValueId};
use rlx_runtime::Tensor;

/// The settings every splat op carries, in `meta` order.
#[derive(Clone, Copy)]
struct Attrs {
    width: u32,
    height: u32,
    tile_size: u32,
    radius_scale: f32,
    alpha_cutoff: f32,
    max_splat_steps: u32,
    transmittance_threshold: f32,
    max_list_entries: u32,
}

const ATTRS: Attrs = Attrs {
    width: 16,
    height: 12,
    tile_size: 8,
    radius_scale: 3.0,
    alpha_cutoff: 1.0 / 255.0,
    max_splat_steps: 256,
    transmittance_threshold: 1e-4,
    max_list_entries: 4096,
};

macro_rules! op {
    ($kind:ident, $a:expr $(, $field:ident: $v:expr)*) => {
        $kind {
            width: $a.width,
            height: $a.height,
            tile_size: $a.tile_size,
            radius_scale: $a.radius_scale,
            alpha_cutoff: $a.alpha_cutoff,
            max_splat_steps: $a.max_splat_steps,
            transmittance_threshold: $a.transmittance_threshold,
            max_list_entries: $a.max_list_entries,
            $($field: $v,)*
        }
    };
}

/// A scene of `n` splats around the origin with `k` SH coefficients, seen from z = 4.
struct Scene {
    attrs: Attrs,
    data: Vec<(&'static str, Vec<f32>)>,
}

const NAMES: [&str; 7] = ["positions", "scales", "rotations", "opacities", "colors", "sh_coeffs", "meta"];

impl Scene {
    fn new(attrs: Attrs, n: usize, k: usize) -> Scene {
        let r = |len: usize, seed: u64, scale: f32, offset: f32| -> Vec<f32> { randn(len, seed).into_iter().map(|v| v * scale + offset).collect() };
        let meta = vec![
            0.3, -0.2, 4.0, // eye
            0.0, 0.0, 0.0, // target
            0.0, 1.0, 0.0, // up
            50.0, 0.5, 20.0, // fov_y, near, far
            0.1, 0.2, 0.3, // background
            attrs.width as f32,
            attrs.height as f32,
            attrs.tile_size as f32,
            attrs.radius_scale,
            attrs.alpha_cutoff,
            attrs.max_splat_steps as f32,
            attrs.transmittance_threshold,
            attrs.max_list_entries as f32,
        ];
        let data = vec![
            ("positions", r(3 * n, 1, 0.6, 0.0)),
            ("scales", r(3 * n, 2, 0.3, -1.6)),
            ("rotations", r(4 * n, 3, 1.0, 0.0)),
            ("opacities", r(n, 4, 1.0, 0.5)),
            ("colors", r(3 * n, 5, 0.2, 0.5)),
            ("sh_coeffs", r(3 * n * k, 6, 0.2, 0.0)),
            ("meta", meta),
        ];
        Scene { attrs, data }
    }

    fn set(&mut self, name: &str, at: usize, v: f32) -> &mut Scene {
        self.data.iter_mut().find(|(n, _)| *n == name).unwrap().1[at] = v;
        self
    }

    fn inputs(&self, g: &mut Graph) -> [ValueId; 7] {
        NAMES.map(|name| {
            let len = self.data.iter().find(|(n, _)| *n == name).unwrap().1.len();
            g.input(name, TensorType::of(DType::F32, &[len]))
        })
    }

    /// Runs `g`, fed this scene (and `extra` inputs), to its outputs or the error text.
    fn run(&self, g: &Graph, extra: &[(&str, Tensor)]) -> Result<Vec<Tensor>, String> {
        let tensors: Vec<(&str, Tensor)> =
            self.data.iter().map(|(n, v)| (*n, Tensor::from_vec(v.clone(), &[v.len()]).unwrap())).chain(extra.iter().cloned()).collect();
        let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
        let mut c = session().compile(g).map_err(|e| e.to_string())?;
        c.run(&named).map_err(|e| e.to_string())
    }

    fn render(&self) -> Result<Vec<Tensor>, String> {
        let mut g = Graph::new();
        let sc = self.inputs(&mut g);
        let img = g.gaussian_splat_render(op!(GaussianSplatRender, self.attrs), sc).unwrap();
        g.set_outputs(vec![img]).unwrap();
        self.run(&g, &[])
    }

    fn prepare_rasterize(&self) -> Result<Vec<Tensor>, String> {
        let mut g = Graph::new();
        let sc = self.inputs(&mut g);
        let prep = g.gaussian_splat_prepare(op!(GaussianSplatPrepare, self.attrs), sc).unwrap();
        let img = g.gaussian_splat_rasterize(op!(GaussianSplatRasterize, self.attrs), prep, sc[6]).unwrap();
        g.set_outputs(vec![img]).unwrap();
        self.run(&g, &[])
    }

    fn backward(&self, band: u32, d_rgba: Vec<f32>) -> Result<Vec<Tensor>, String> {
        let mut g = Graph::new();
        let sc = self.inputs(&mut g);
        let d = g.input("d_rgba", TensorType::of(DType::F32, &[d_rgba.len()]));
        let attrs = op!(GaussianSplatRenderBackward, self.attrs, loss_grad_clip: 1.0, sh_band: band, max_anisotropy: 10.0);
        let grads = g.gaussian_splat_render_backward(attrs, sc, d).unwrap();
        g.set_outputs(grads).unwrap();
        let len = d_rgba.len();
        self.run(&g, &[("d_rgba", Tensor::from_vec(d_rgba, &[len]).unwrap())])
    }
}

fn fails(r: Result<Vec<Tensor>, String>, op: &str, what: &str) {
    let e = r.err().unwrap_or_else(|| panic!("expected an error containing {what:?}"));
    assert!(e.contains(op) && e.contains(what), "error {e:?} lacks {op:?} / {what:?}");
}

#[test]
fn render_equals_rasterize_of_prepare_on_a_threaded_scene() {
    let attrs = Attrs { width: 64, height: 48, tile_size: 16, ..ATTRS };
    let sc = Scene::new(attrs, 300, 4);
    let fused = sc.render().unwrap();
    let staged = sc.prepare_rasterize().unwrap();
    assert_close(&staged[0], &fused[0], 1e-5, 1e-5);
    let img = fused[0].to_f64_vec();
    assert!(img.iter().all(|v| v.is_finite()));
    assert!(img.chunks(4).any(|p| p[3] > 0.5), "the scene should cover some pixels");
    let grads = sc.backward(1, randn(64 * 48 * 4, 9)).unwrap();
    assert!(grads.iter().all(|g| g.to_f64_vec().iter().all(|v| v.is_finite())));
}

#[test]
fn meta_settings_must_match_the_attributes() {
    for (at, v, what) in [
        (15, 0.0, "meta[15] (width) = 0 must equal the op's width 16"),
        (16, -12.0, "meta[16] (height) = -12 must equal the op's height 12"),
        (17, 16.0, "meta[17] (tile_size) = 16 must equal the op's tile_size 8"),
        (19, 0.5, "meta[19] (alpha_cutoff) = 0.5 must equal the op's alpha_cutoff"),
        (22, 10.0, "meta[22] (max_list_entries) = 10 must equal the op's max_list_entries 4096"),
    ] {
        let mut sc = Scene::new(ATTRS, 5, 1);
        sc.set("meta", at, v);
        fails(sc.render(), "GaussianSplatRender", what);
        fails(sc.prepare_rasterize(), "GaussianSplatPrepare", what);
        fails(sc.backward(0, vec![0.5; 16 * 12 * 4]), "GaussianSplatRenderBackward", what);
    }
}

#[test]
fn bad_cameras_are_errors() {
    for (at, v, what) in [
        (1, f32::NAN, "meta[1] = NaN must be finite"),
        (13, f32::INFINITY, "meta[13] = inf must be finite"),
        (9, 0.0, "meta[9] (fov_y) = 0 must lie in (0, 180) degrees"),
        (9, 180.0, "meta[9] (fov_y) = 180 must lie in (0, 180) degrees"),
        (10, 0.0, "(near, far) = (0, 20) need 0 < near < far"),
        (11, 0.25, "(near, far) = (0.5, 0.25) need 0 < near < far"),
    ] {
        let mut sc = Scene::new(ATTRS, 5, 1);
        sc.set("meta", at, v);
        fails(sc.render(), "GaussianSplatRender", what);
    }
    let mut sc = Scene::new(ATTRS, 5, 1);
    sc.set("meta", 3, 0.3).set("meta", 4, -0.2).set("meta", 5, 4.0);
    fails(sc.render(), "GaussianSplatRender", "equals the target: no view direction");
    let mut sc = Scene::new(ATTRS, 5, 1);
    sc.set("meta", 6, 0.3).set("meta", 7, -0.2).set("meta", 8, 4.0); // along the view
    fails(sc.render(), "GaussianSplatRender", "is zero or parallel to the view direction");
    let mut sc = Scene::new(ATTRS, 5, 1);
    sc.set("meta", 7, 0.0); // up = 0
    fails(sc.backward(0, vec![0.5; 16 * 12 * 4]), "GaussianSplatRenderBackward", "is zero or parallel to the view direction");
}

#[test]
fn bad_scene_values_are_errors() {
    let mut sc = Scene::new(ATTRS, 5, 1);
    sc.set("positions", 7, f32::NAN);
    fails(sc.render(), "GaussianSplatRender", "positions[7] = NaN must be finite");
    let mut sc = Scene::new(ATTRS, 5, 1);
    sc.set("sh_coeffs", 2, f32::NEG_INFINITY);
    fails(sc.prepare_rasterize(), "GaussianSplatPrepare", "sh_coeffs[2] = -inf must be finite");
    let mut sc = Scene::new(ATTRS, 5, 1);
    for j in 8..12 {
        sc.set("rotations", j, 0.0);
    }
    fails(sc.render(), "GaussianSplatRender", "rotations[8..12] of splat 2 is the zero quaternion");
    let mut sc = Scene::new(ATTRS, 5, 1);
    sc.set("positions", 0, 0.0).set("positions", 1, 0.0).set("positions", 2, 0.0).set("scales", 0, 400.0);
    fails(sc.render(), "GaussianSplatRender", "splat 0: its screen covariance overflows");
    let sc = Scene::new(ATTRS, 5, 1);
    let mut d = vec![0.5; 16 * 12 * 4];
    d[3] = f32::NAN; // alpha channel: ignored
    assert!(sc.backward(0, d.clone()).is_ok());
    d[4 * 7 + 1] = f32::NAN;
    fails(sc.backward(0, d), "GaussianSplatRenderBackward", "d_rgba[29] = NaN must be finite");
}

/// A splat behind the camera is culled, not an error; a scene of culled splats renders the
/// background.
#[test]
fn culled_splats_leave_the_background() {
    let mut sc = Scene::new(ATTRS, 2, 0);
    sc.set("positions", 2, 9.0).set("positions", 5, -40.0);
    let img = sc.render().unwrap()[0].to_f64_vec();
    for p in img.chunks(4) {
        assert_eq!(p[3], 0.0);
        assert!((p[0] - 0.349_190).abs() < 1e-5, "sRGB(0.1) = {}", p[0]);
    }
}

#[test]
fn list_overflow_is_an_error() {
    let attrs = Attrs { max_list_entries: 3, ..ATTRS };
    let mut sc = Scene::new(attrs, 6, 1);
    for j in 0..6 {
        sc.set("scales", 3 * j, 0.0); // σ = 1 world unit: every splat covers several tiles
    }
    let what = "more than max_list_entries 3";
    fails(sc.render(), "GaussianSplatRender", what);
    fails(sc.prepare_rasterize(), "GaussianSplatPrepare", what);
    fails(sc.backward(0, vec![0.5; 16 * 12 * 4]), "GaussianSplatRenderBackward", what);
}

#[test]
fn rasterize_rejects_a_buffer_it_did_not_prepare() {
    let sc = Scene::new(ATTRS, 4, 1);
    let mut g = Graph::new();
    let meta = g.input("meta", TensorType::of(DType::F32, &[23]));
    // 15·4 + 4096 + 2·4 + 3·192 + 11
    let len = 60 + 4096 + 8 + 576 + 11;
    let prep = g.input("prep", TensorType::of(DType::F32, &[len]));
    let img = g.gaussian_splat_rasterize(op!(GaussianSplatRasterize, ATTRS), prep, meta).unwrap();
    g.set_outputs(vec![img]).unwrap();
    let meta_data = sc.data[6].1.clone();
    let run = |buf: Vec<f32>| {
        let tensors = [("meta", Tensor::from_vec(meta_data.clone(), &[23]).unwrap()), ("prep", Tensor::from_vec(buf, &[len]).unwrap())];
        let named: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
        session().compile(&g).unwrap().run(&named).map_err(|e| e.to_string())
    };
    fails(run(vec![0.0; len]), "GaussianSplatRasterize", "is not a prepare buffer header for 4 splats");

    // A real buffer, then one with a list entry pointing past the splats.
    let mut gp = Graph::new();
    let ins = sc.inputs(&mut gp);
    let p = gp.gaussian_splat_prepare(op!(GaussianSplatPrepare, ATTRS), ins).unwrap();
    gp.set_outputs(vec![p]).unwrap();
    let mut buf = sc.run(&gp, &[]).unwrap()[0].to_vec::<f32>().unwrap();
    assert!(run(buf.clone()).is_ok());
    let pairs = buf[2] as usize;
    assert!(pairs > 0, "the scene should cover some tiles");
    buf[11 + 60] = 7.0;
    fails(run(buf.clone()), "GaussianSplatRasterize", "prep[71] = 7 is not a valid splat index (below 4)");
    buf[3] = 32.0;
    fails(run(buf), "GaussianSplatRasterize", "the buffer was prepared for other settings");
}

#[test]
fn sh_band_above_degree_three_is_an_error() {
    let sc = Scene::new(ATTRS, 3, 25);
    fails(sc.backward(4, vec![0.5; 16 * 12 * 4]), "GaussianSplatRenderBackward", "sh_band 4 is above degree 3");
    assert!(sc.backward(3, vec![0.5; 16 * 12 * 4]).is_ok());
}
