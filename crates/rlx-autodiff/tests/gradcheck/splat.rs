//! Gradient case for the Gaussian splat renderer. The render is smooth in its scene only
//! away from its discrete decisions, so the scene is built so that finite differences never
//! cross one: one tile covers the image (no tile rectangle changes), `alpha_cutoff` and
//! `transmittance_threshold` are 0 (no splat is skipped or cut off), opacities stay below the
//! 0.99 alpha clamp, colours above the 0 clamp, and the three splats are well apart in depth
//! (their order is fixed). The camera (`meta`) is constant and gets no gradient.

use super::harness::{Case, Domain::*};

/// The op is F32-only (computed in f64, rounded to F32 once): checked at f32 precision.
const F32: f64 = 1e-2;

/// Camera at `(0, 0, −5)` looking at the origin, fov-y 50°, near 0.5, far 50, a grey-blue
/// background, then the op's settings repeated.
const META: &[f64] =
    &[0.0, 0.0, -5.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 50.0, 0.5, 50.0, 0.25, 0.35, 0.45, 16.0, 12.0, 16.0, 3.0, 0.0, 16.0, 0.0, 16.0];

/// Three splats a few pixels from the centre of the 16×12 image, 0.8 apart in depth.
const POSITIONS: &[f64] = &[-0.6, -0.3, -0.8, 0.5, 0.4, 0.0, 0.1, -0.5, 0.8];

pub const CASES: &[Case] = &[Case {
    name: "gaussian splat render (RGB; alpha gets no gradient)",
    src: r#"%0 = Input(name:"positions",ty:(dtype:F32,shape:[9]))()
        %1 = Input(name:"scales",ty:(dtype:F32,shape:[9]))()
        %2 = Input(name:"rotations",ty:(dtype:F32,shape:[12]))()
        %3 = Input(name:"opacities",ty:(dtype:F32,shape:[3]))()
        %4 = Input(name:"colors",ty:(dtype:F32,shape:[9]))()
        %5 = Input(name:"sh",ty:(dtype:F32,shape:[36]))()
        %6 = Input(name:"meta",ty:(dtype:F32,shape:[23]))()
        %7 = GaussianSplatRender(width:16,height:12,tile_size:16,radius_scale:3.0,alpha_cutoff:0.0,max_splat_steps:16,transmittance_threshold:0.0,max_list_entries:16)(%0, %1, %2, %3, %4, %5, %6)
        %8 = Reshape(new_shape:[192,4])(%7)
        %9 = Narrow(axis:1,start:0,len:3)(%8)
        %10 = Cast(to:F64)(%9)
        return %10"#,
    domains: &[
        ("positions", Around(POSITIONS, 0.15)),
        ("scales", Around(&[-0.4], 0.2)),
        ("rotations", Around(&[0.1, -0.2, 0.3, 0.9], 0.3)),
        ("opacities", Around(&[0.3], 0.5)),
        ("colors", Around(&[0.5], 0.3)),
        ("sh", Around(&[0.0], 0.3)),
        ("meta", Fixed(META)),
    ],
    tol: F32,
}];
