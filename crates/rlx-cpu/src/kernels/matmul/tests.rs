//! `sgemm` on every register tile this CPU has, against a float64 triple loop written here.

use super::*;
use crate::view::{In, Out};

/// Uniform values in [-1, 1) from a seeded xorshift stream (the int8 and bf16 tests' too).
pub(super) fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `a·b` in float64, reading both through their strides.
fn reference(a: &Mat, b: &Mat) -> Vec<f64> {
    let at = |x: &Mat, i: usize, j: usize| x.data[i * x.strides[0] + j * x.strides[1]] as f64;
    let mut out = vec![0.0; a.rows * b.cols];
    for i in 0..a.rows {
        for j in 0..b.cols {
            out[i * b.cols + j] = (0..a.cols).map(|p| at(a, i, p) * at(b, p, j)).sum();
        }
    }
    out
}

/// Checks `got` (row stride `ld`) against `want` ([m, n]) within f32 accumulation error.
fn check(got: &[f32], ld: usize, want: &[f64], m: usize, n: usize, k: usize, what: &str) {
    let tol = 2e-6 * (k as f64 + 1.0);
    for i in 0..m {
        for j in 0..n {
            let (g, w) = (got[i * ld + j] as f64, want[i * n + j]);
            assert!((g - w).abs() <= tol, "{what}: c[{i}, {j}] = {g}, want {w} (m={m} k={k} n={n})");
        }
    }
}

/// `tile` with the blocking this process chose (the one pre-packed weights are packed with).
fn on(tile: Tile) -> Choice {
    Choice { tile, ..Choice::get() }
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap()
}

const DIMS: [usize; 4] = [1, 7, 63, 129];

#[test]
fn every_tile_matches_f64_on_odd_sizes_at_one_and_two_threads() {
    let mut shapes: Vec<[usize; 3]> = DIMS.iter().flat_map(|&m| DIMS.iter().flat_map(move |&k| DIMS.iter().map(move |&n| [m, k, n]))).collect();
    shapes.extend([[1000, 7, 63], [7, 1000, 129], [63, 129, 1000], [129, 1000, 7], [1000, 63, 1]]);
    for tile in Tile::available() {
        for threads in [1, 2] {
            pool(threads).install(|| {
                for &[m, k, n] in &shapes {
                    let (av, bv) = (random(m * k, (m * 31 + k) as u64), random(k * n, (k * 17 + n) as u64));
                    let (a, b) = (Mat::row_major(&av, m, k), Mat::row_major(&bv, k, n));
                    let mut c = random(m * n, 3);
                    sgemm_with(on(tile), a, b, MatMut::row_major(&mut c, m, n), false, true, None).unwrap();
                    check(&c, n, &reference(&a, &b), m, n, k, &format!("{} on {threads} threads", tile.name));
                }
            });
        }
    }
}

/// Every tile × every blocking `rlx tune` may pick (and a `kc` small enough to cut every inner
/// dimension here into several blocks) agrees with f64: another `kc` only moves where the f32
/// sums are cut into blocks.
#[test]
fn every_tuning_candidate_matches_f64() {
    let blockings: Vec<Blocking> = tune::KCS.iter().chain(&[16]).flat_map(|&kc| tune::NCS.iter().map(move |&nc| Blocking { kc, nc })).collect();
    for [m, k, n] in [[63, 1000, 129], [129, 129, 1000], [37, 300, 45]] {
        let (av, bv) = (random(m * k, (m * 31 + k) as u64), random(k * n, (k * 17 + n) as u64));
        let (a, b) = (Mat::row_major(&av, m, k), Mat::row_major(&bv, k, n));
        let want = reference(&a, &b);
        for (&blocking, tile, threads) in blockings.iter().flat_map(|b| Tile::available().into_iter().flat_map(move |t| [1, 2].map(|n| (b, t, n)))) {
            let mut c = random(m * n, 3);
            pool(threads).install(|| sgemm_with(Choice { tile, blocking }, a, b, MatMut::row_major(&mut c, m, n), false, true, None)).unwrap();
            check(&c, n, &want, m, n, k, &format!("{} {blocking:?} on {threads} threads", tile.name));
        }
    }
}

#[test]
fn strided_and_offset_operands_accumulate_into_a_padded_output() {
    let (m, k, n) = (37, 300, 45);
    for tile in Tile::available() {
        for threads in [1, 2] {
            // `a` is stored transposed with a leading dim of m + 3, starting at an odd offset;
            // `b` is row-major with a leading dim of n + 5, also at an odd offset.
            let (lda, ldb, ldc) = (m + 3, n + 5, n + 7);
            let abuf = random(1 + k * lda, 11);
            let bbuf = random(3 + k * ldb, 12);
            let a = Mat { data: &abuf[1..], rows: m, cols: k, strides: [1, lda] };
            let b = Mat { data: &bbuf[3..], rows: k, cols: n, strides: [ldb, 1] };
            let start = random(1 + m * ldc, 13);
            let mut cbuf = start.clone();
            let c = MatMut { data: &mut cbuf[1..], rows: m, cols: n, ld: ldc };
            pool(threads).install(|| sgemm_with(on(tile), a, b, c, true, true, None)).unwrap();
            let mut want = reference(&a, &b);
            for i in 0..m {
                for j in 0..n {
                    want[i * n + j] += start[1 + i * ldc + j] as f64;
                }
                for j in n..ldc {
                    assert_eq!(cbuf[1 + i * ldc + j], start[1 + i * ldc + j], "{}: padding c[{i}, {j}] written", tile.name);
                }
            }
            assert_eq!(cbuf[0], start[0], "{}: element before c written", tile.name);
            check(&cbuf[1..], ldc, &want, m, n, k, tile.name);
        }
    }
}

#[test]
fn empty_inner_dimension_zeroes_or_keeps_the_output() {
    let (m, n) = (5, 9);
    let empty: [f32; 0] = [];
    let mut c = random(m * n, 4);
    let keep = c.clone();
    sgemm(Mat::row_major(&empty, m, 0), Mat::row_major(&empty, 0, n), MatMut::row_major(&mut c, m, n), true, true).unwrap();
    assert_eq!(c, keep);
    sgemm(Mat::row_major(&empty, m, 0), Mat::row_major(&empty, 0, n), MatMut::row_major(&mut c, m, n), false, true).unwrap();
    assert!(c.iter().all(|&v| v == 0.0));
}

#[test]
fn mismatched_or_short_operands_are_errors() {
    let (a, b) = (random(6, 1), random(12, 2));
    let mut c = vec![0.0; 8];
    let e = sgemm(Mat::row_major(&a, 2, 3), Mat::row_major(&b, 4, 3), MatMut::row_major(&mut c, 2, 3), false, false);
    assert!(e.unwrap_err().contains("[2, 3] × [4, 3]"));
    let e = sgemm(Mat::row_major(&a, 2, 4), Mat::row_major(&b, 4, 2), MatMut::row_major(&mut c, 2, 2), false, false);
    assert!(e.unwrap_err().contains("too short"));
}

/// Runs `MatMul` on f32 operands of the given dims.
fn matmul_f32(a: &[f32], da: &[usize], b: &[f32], db: &[usize], dout: &[usize]) -> Vec<f32> {
    let mut out = vec![0.0f32; dout.iter().product()];
    let ia = In { dtype: rlx_ir::DType::F32, dims: da, bytes: bytemuck::cast_slice(a) };
    let ib = In { dtype: rlx_ir::DType::F32, dims: db, bytes: bytemuck::cast_slice(b) };
    let mut o = Out { dtype: rlx_ir::DType::F32, dims: dout, bytes: bytemuck::cast_slice_mut(&mut out) };
    matmul(ia, ib, &mut o).unwrap();
    out
}

#[test]
fn batched_matmul_broadcasts_batch_dims_at_one_and_two_threads() {
    let (m, k, n) = (9, 70, 33);
    // a [2, 1, m, k] × b [3, k, n] → [2, 3, m, n]; b [k, n] folds the batch into m.
    let av = random(2 * m * k, 21);
    let bv = random(3 * k * n, 22);
    for threads in [1, 2] {
        let got = pool(threads).install(|| matmul_f32(&av, &[2, 1, m, k], &bv, &[3, k, n], &[2, 3, m, n]));
        for (i, j) in (0..2).flat_map(|i| (0..3).map(move |j| (i, j))) {
            let a = Mat::row_major(&av[i * m * k..], m, k);
            let b = Mat::row_major(&bv[j * k * n..], k, n);
            let at = (i * 3 + j) * m * n;
            check(&got[at..at + m * n], n, &reference(&a, &b), m, n, k, &format!("batch ({i}, {j})"));
        }
        let folded = pool(threads).install(|| matmul_f32(&av, &[2, m, k], &bv[..k * n], &[k, n], &[2, m, n]));
        let want = reference(&Mat::row_major(&av, 2 * m, k), &Mat::row_major(&bv, k, n));
        check(&folded, n, &want, 2 * m, n, k, "folded batch");
    }
}

#[test]
fn gemm_slice_f32_reads_a_transposed_operand() {
    let (m, k, n) = (20, 150, 40);
    let (av, bv) = (random(k * m, 31), random(k * n, 32));
    let mut out = random(m * n, 33);
    let start = out.clone();
    gemm_slice(Mat { data: &av, rows: m, cols: k, strides: [1, m] }, Mat::row_major(&bv, k, n), &mut out, true, true);
    let mut want = reference(&Mat { data: &av, rows: m, cols: k, strides: [1, m] }, &Mat::row_major(&bv, k, n));
    want.iter_mut().zip(&start).for_each(|(w, &s)| *w += s as f64);
    check(&out, n, &want, m, n, k, "gemm_slice");
}

#[test]
fn half_float_operands_are_widened_while_packed() {
    use half::{bf16, f16};
    let (m, k, n) = (30, 200, 50);
    let (av, bv) = (random(m * k, 41), random(k * n, 42));
    let a16: Vec<f16> = av.iter().map(|&x| f16::from_f32(x)).collect();
    let bb16: Vec<bf16> = bv.iter().map(|&x| bf16::from_f32(x)).collect();
    let (aw, bw): (Vec<f32>, Vec<f32>) = (a16.iter().map(|x| x.to_f32()).collect(), bb16.iter().map(|x| x.to_f32()).collect());
    let want = reference(&Mat::row_major(&aw, m, k), &Mat::row_major(&bw, k, n));
    // f32 × bf16 → f32: only the widening of b and f32 accumulation stand between the two.
    let mut out = vec![0.0f32; m * n];
    let dims = ([m, k], [k, n], [m, n]);
    let ia = In { dtype: rlx_ir::DType::F32, dims: &dims.0, bytes: bytemuck::cast_slice(&aw) };
    let ib = In { dtype: rlx_ir::DType::BF16, dims: &dims.1, bytes: bytemuck::cast_slice(&bb16) };
    matmul(ia, ib, &mut Out { dtype: rlx_ir::DType::F32, dims: &dims.2, bytes: bytemuck::cast_slice_mut(&mut out) }).unwrap();
    check(&out, n, &want, m, n, k, "f32 × bf16");
    // f16 × bf16 → f16: the result is rounded once, to f16.
    let mut out16 = vec![f16::ZERO; m * n];
    let ia = In { dtype: rlx_ir::DType::F16, dims: &dims.0, bytes: bytemuck::cast_slice(&a16) };
    matmul(ia, ib, &mut Out { dtype: rlx_ir::DType::F16, dims: &dims.2, bytes: bytemuck::cast_slice_mut(&mut out16) }).unwrap();
    for (i, (g, w)) in out16.iter().zip(&want).enumerate() {
        assert!((g.to_f64() - w).abs() <= w.abs() / 1024.0 + 1e-4, "f16 × bf16: c[{i}] = {g}, want {w}");
    }
}

#[test]
fn epilogue_sees_each_finished_element_once() {
    // k = 500 takes two packed steps: the bias and ReLU must follow the whole sum.
    let (m, k, n) = (50, 500, 70);
    let (av, bv, bias) = (random(m * k, 51), random(k * n, 52), random(n, 53));
    let (a, b) = (Mat::row_major(&av, m, k), Mat::row_major(&bv, k, n));
    let want: Vec<f64> = reference(&a, &b).iter().enumerate().map(|(i, &x)| (x + bias[i % n] as f64).max(0.0)).collect();
    let bias_relu = |_: usize, c0: usize, v: &mut [f32]| v.iter_mut().zip(&bias[c0..]).for_each(|(x, &b)| *x = (*x + b).max(0.0));
    for tile in Tile::available() {
        for threads in [1, 2] {
            let mut c = vec![0.0f32; m * n];
            pool(threads).install(|| sgemm_with(on(tile), a, b, MatMut::row_major(&mut c, m, n), false, true, Some(&bias_relu))).unwrap();
            check(&c, n, &want, m, n, k, &format!("{} epilogue on {threads} threads", tile.name));
        }
    }
}

#[test]
fn few_rows_match_f64_for_both_layouts_of_b_with_accumulate_and_epilogue_up_to_the_packed_path() {
    let ks = [1, 7, 63, 129, 1000];
    let ns = [1, 7, 63, 129, 1000];
    for tile in Tile::available() {
        for threads in [1, 2] {
            pool(threads).install(|| {
                for m in 1..=9 {
                    for (&k, &n) in ks.iter().flat_map(|k| ns.iter().map(move |n| (k, n))) {
                        let (ldb, ldbt, ldc) = (n + 3, k + 5, n + 2);
                        let (av, bv, btv) = (random(m * (k + 1), (m * 7 + k) as u64), random(k * ldb, n as u64), random(n * ldbt, (n + k) as u64));
                        // `a` with row stride k + 1; `b` row-major and `bt` column-major, both padded.
                        let a = Mat { data: &av, rows: m, cols: k, strides: [k + 1, 1] };
                        let layouts = [Mat { data: &bv, rows: k, cols: n, strides: [ldb, 1] }, Mat { data: &btv, rows: k, cols: n, strides: [1, ldbt] }];
                        let bias = random(n, 9);
                        let shift = |_: usize, c0: usize, v: &mut [f32]| v.iter_mut().zip(&bias[c0..]).for_each(|(x, &b)| *x = (*x + b).max(0.0));
                        for b in layouts {
                            for accumulate in [false, true] {
                                let start = random(m * ldc, 5);
                                let mut c = start.clone();
                                sgemm_with(on(tile), a, b, MatMut { data: &mut c, rows: m, cols: n, ld: ldc }, accumulate, true, Some(&shift)).unwrap();
                                let mut want = reference(&a, &b);
                                for (i, w) in want.iter_mut().enumerate() {
                                    let (r, j) = (i / n, i % n);
                                    let base = if accumulate { start[r * ldc + j] as f64 } else { 0.0 };
                                    *w = (*w + base + bias[j] as f64).max(0.0);
                                }
                                let what = format!("{} m={m} b strides {:?} accumulate={accumulate} on {threads} threads", tile.name, b.strides);
                                check(&c, ldc, &want, m, n, k, &what);
                                for r in 0..m {
                                    assert_eq!(&c[r * ldc + n..(r + 1) * ldc], &start[r * ldc + n..(r + 1) * ldc], "{what}: padding written");
                                }
                            }
                        }
                    }
                }
            });
        }
    }
}

#[test]
fn prepacked_b_gives_the_unpacked_results_bit_for_bit_and_unpacks() {
    for tile in Tile::available() {
        for threads in [1, 2] {
            pool(threads).install(|| {
                for &[m, k, n] in &[[6, 7, 1], [63, 500, 129], [129, 63, 1000], [5, 1000, 63], [2, 129, 7]] {
                    let (ldb, ldc) = (n + 3, n + 1);
                    let (av, bv) = (random(m * k, (m + k) as u64), random(k * ldb, (k + n) as u64));
                    let (a, b) = (Mat::row_major(&av, m, k), Mat { data: &bv, rows: k, cols: n, strides: [ldb, 1] });
                    let packed = PackedB::with_tile(tile, b);
                    let bias = random(n, 7);
                    let shift = |_: usize, c0: usize, v: &mut [f32]| v.iter_mut().zip(&bias[c0..]).for_each(|(x, &b)| *x -= b);
                    for accumulate in [false, true] {
                        let start = random(m * ldc, 8);
                        let (mut want, mut got) = (start.clone(), start.clone());
                        sgemm_with(on(tile), a, b, MatMut { data: &mut want, rows: m, cols: n, ld: ldc }, accumulate, true, Some(&shift)).unwrap();
                        sgemm_prepacked(a, b, &packed, MatMut { data: &mut got, rows: m, cols: n, ld: ldc }, accumulate, true, Some(&shift)).unwrap();
                        // Few rows unpacked take their own path, which packed `b` skips.
                        if m > FEW_ROWS {
                            assert_eq!(got, want, "{} [{m}, {k}] × [{k}, {n}] accumulate={accumulate} on {threads} threads", tile.name);
                        }
                        let reference: Vec<f64> = reference(&a, &b)
                            .iter()
                            .enumerate()
                            .map(|(i, &v)| v - bias[i % n] as f64 + if accumulate { start[i / n * ldc + i % n] as f64 } else { 0.0 })
                            .collect();
                        check(&got, ldc, &reference, m, n, k, tile.name);
                    }
                    let unpacked: Vec<f32> = (0..k).flat_map(|p| bv[p * ldb..p * ldb + n].to_vec()).collect();
                    assert_eq!(packed.unpack(), unpacked, "{} unpacks [{k}, {n}]", tile.name);
                    assert_eq!(packed.dims(), [k, n]);
                }
            });
        }
    }
    let bv = random(12, 1);
    let packed = PackedB::new(Mat::row_major(&bv, 3, 4));
    let (av, mut c) = (random(6, 2), vec![0.0; 8]);
    let e = sgemm_prepacked(Mat::row_major(&av, 2, 3), Mat::row_major(&bv, 4, 3), &packed, MatMut::row_major(&mut c, 2, 3), false, false, None);
    assert!(e.unwrap_err().contains("packed as [3, 4]"));
}

#[test]
fn filled_b_over_a_packed_by_rows_gives_the_packed_results_and_unpacks() {
    for tile in Tile::available() {
        for threads in [1, 2] {
            pool(threads).install(|| {
                for &[m, k, n] in &[[1, 1, 1], [7, 3, 63], [63, 500, 129], [129, 63, 1000], [13, 1000, 7]] {
                    let (av, bv) = (random(m * k, (m + 2 * k) as u64), random(k * n, (k + 3 * n) as u64));
                    let (a, b) = (Mat::row_major(&av, m, k), Mat::row_major(&bv, k, n));
                    let packed = PackedB::rows_of(tile, a, &[m, 1, k]);
                    let nr = tile.nr;
                    let fill = |p0: usize, kc: usize, cols: std::ops::Range<usize>, panels: &mut [f32]| {
                        for (j, panel) in cols.zip(panels.chunks_exact_mut(kc * nr)) {
                            for (p, step) in panel.chunks_exact_mut(nr).enumerate() {
                                for (l, v) in step.iter_mut().enumerate() {
                                    *v = if j * nr + l < n { bv[(p0 + p) * n + j * nr + l] } else { 0.0 };
                                }
                            }
                        }
                    };
                    let bias = random(m, 9);
                    let shift = |r: usize, _: usize, v: &mut [f32]| v.iter_mut().for_each(|x| *x -= bias[r]);
                    let (mut want, mut got) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                    sgemm_with(on(tile), a, b, MatMut::row_major(&mut want, m, n), false, true, Some(&shift)).unwrap();
                    sgemm_filled(&packed, n, &fill, MatMut::row_major(&mut got, m, n), true, Some(&shift)).unwrap();
                    if m > FEW_ROWS {
                        assert_eq!(got, want, "{} [{m}, {k}] × [{k}, {n}] on {threads} threads", tile.name);
                    }
                    let reference: Vec<f64> = reference(&a, &b).iter().enumerate().map(|(i, &v)| v - bias[i / n] as f64).collect();
                    check(&got, n, &reference, m, n, k, tile.name);
                    assert_eq!(packed.unpack(), av, "{} unpacks the rows of [{m}, {k}]", tile.name);
                    assert_eq!(packed.dims(), [m, 1, k]);
                    let columns = PackedB::columns_of(tile, a, &[m, 1, k]);
                    assert_eq!((columns.unpack(), columns.layout()), (av.clone(), Layout::ColumnsOfA), "{} unpacks the columns of [{m}, {k}]ᵀ", tile.name);
                    assert!(sgemm_filled(&columns, n, &fill, MatMut::row_major(&mut got, m, n), true, None).is_err());
                }
            });
        }
    }
}

#[test]
fn a_tile_is_named_by_its_name_or_its_instruction_set() {
    for t in Tile::available() {
        assert_eq!(Tile::named(t.name).map(|x| x.name), Some(t.name));
        assert_eq!(Tile::named(&t.name.replace('×', "x").to_uppercase()).map(|x| x.name), Some(t.name));
        assert_eq!(Tile::named(t.isa).map(|x| x.isa), Some(t.isa));
    }
    assert_eq!(Tile::named("portable").map(|t| t.name), Some("portable 4×8"));
    assert!(Tile::named("sve 8×8").is_none());
}

/// `DotGeneral` read in place agrees with the permuted copies it replaces, over batch axes,
/// transposed sides, several contracted axes, and axes that do not merge (which fall back).
#[test]
fn dot_general_in_place_agrees_with_permuted_copies() {
    let dg = |lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]| DotGeneral { lhs_batch: lb.to_vec(), rhs_batch: rb.to_vec(), lhs_contracting: lc.to_vec(), rhs_contracting: rc.to_vec() };
    // (lhs dims, rhs dims, dimension numbers, output dims, whether the axes merge)
    type Case = (Vec<usize>, Vec<usize>, DotGeneral, Vec<usize>, bool);
    let cases: [Case; 6] = [
        (vec![96, 40], vec![96, 24], dg(&[], &[], &[0], &[0]), vec![40, 24], true),
        (vec![40, 96], vec![24, 96], dg(&[], &[], &[1], &[1]), vec![40, 24], true),
        (vec![3, 20, 16], vec![3, 16, 12], dg(&[0], &[0], &[2], &[1]), vec![3, 20, 12], true),
        (vec![3, 16, 20], vec![12, 3, 16], dg(&[0], &[1], &[1], &[2]), vec![3, 20, 12], true),
        (vec![6, 5, 7], vec![6, 5, 9], dg(&[], &[], &[0, 1], &[0, 1]), vec![7, 9], true),
        (vec![6, 5, 7], vec![5, 6, 9], dg(&[], &[], &[0, 1], &[1, 0]), vec![7, 9], false),
    ];
    for (i, (da, db, d, dout, merges)) in cases.into_iter().enumerate() {
        let (xa, xb) = (random(da.iter().product(), 7 + i as u64), random(db.iter().product(), 70 + i as u64));
        let (a, b) = (In { dtype: DType::F32, dims: &da, bytes: bytemuck::cast_slice(&xa) }, In { dtype: DType::F32, dims: &db, bytes: bytemuck::cast_slice(&xb) });
        let (mut got, mut want) = (vec![f32::NAN; dout.iter().product()], vec![f32::NAN; dout.iter().product()]);
        let ran = dot_general_in_place::<f32>(&d, a, b, &mut Out { dtype: DType::F32, dims: &dout, bytes: bytemuck::cast_slice_mut(&mut got) });
        assert_eq!(ran, merges, "case {i}: whether its axes merge");
        dot_general(&d, a, b, &mut Out { dtype: DType::F32, dims: &dout, bytes: bytemuck::cast_slice_mut(&mut got) }).unwrap();
        dot_general_permuted(&d, a, b, &mut Out { dtype: DType::F32, dims: &dout, bytes: bytemuck::cast_slice_mut(&mut want) }).unwrap();
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got.iter().zip(&want).fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(worst <= 1e-5 * scale, "case {i}: {worst} against {scale}");
    }
}
