//! `Gather` (rows of 16-byte chunks copied whole, and single elements) and `GatherBackward`
//! (an embedding's gradient) on the GPU against the CPU on fresh random tables and
//! gradients, with repeated indices (whose rows sum), along the first and a negative axis; and
//! an index outside the table as a typed error. Skips, saying so, without a CUDA device.

mod common;

use common::{agree_native, f32_input, gpu, random, Tol};
use rlx_ir::ops::index::{Gather, GatherBackward};
use rlx_ir::{DType, Graph, OpKind, Shape, TensorType};
use rlx_runtime::Tensor;

/// The gradient of a `[rows, width]`-style table of `table` dims from `dy` of `dy_dims` and
/// `idx` of `idx_dims`, gathered along `axis`.
fn graph(table: &[usize], axis: i32, dy_dims: &[usize], idx_dims: &[usize]) -> Graph {
    let mut g = Graph::new();
    let dy = f32_input(&mut g, "dy", dy_dims);
    let idx = g.input("idx", TensorType::new(DType::I64, Shape::of(idx_dims)));
    let out = g.add1(GatherBackward { axis, table_shape: Shape::of(table) }, &[dy, idx]).unwrap();
    g.set_outputs(vec![out]).unwrap();
    g
}

fn indices(n: usize, extent: usize, seed: u64) -> Vec<i64> {
    random(&[n], seed, 0.0, extent as f32).to_vec::<f32>().unwrap().into_iter().map(|x| (x as i64).min(extent as i64 - 1)).collect()
}

/// `table [..]` gathered along `axis` by `idx` of `idx_dims`.
fn lookup(table: &[usize], axis: usize, idx_dims: &[usize]) -> Graph {
    let mut g = Graph::new();
    let t = f32_input(&mut g, "table", table);
    let idx = g.input("idx", TensorType::new(DType::I64, Shape::of(idx_dims)));
    let out = g.add1(Gather { axis }, &[t, idx]).unwrap();
    g.set_outputs(vec![out]).unwrap();
    g
}

#[test]
fn an_embedding_lookup_copies_rows_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    for (table, axis, idx_dims, extent) in [(vec![50, 96], 0, vec![3, 40], 50), (vec![2, 30, 68], 1, vec![7], 30), (vec![40, 5], 0, vec![9], 40)] {
        let g = lookup(&table, axis, &idx_dims);
        let n = idx_dims.iter().product();
        let idx = Tensor::from_vec(indices(n, extent, 6), &idx_dims).unwrap();
        agree_native(&gpu, &g, &[("table", random(&table, 7, -1.0, 1.0)), ("idx", idx)], Tol::rel(0.0), &[OpKind::Gather]);
    }
    let mut c = gpu.compile(&lookup(&[5, 64], 0, &[3])).unwrap();
    let idx = Tensor::from_vec(vec![1i64, 9, 2], &[3]).unwrap();
    let err = c.run(&[("table", &random(&[5, 64], 8, -1.0, 1.0)), ("idx", &idx)]).unwrap_err().to_string();
    assert!(err.contains('9') && err.contains('5'), "{err}");
}

#[test]
fn an_embedding_gradient_sums_repeated_rows_as_on_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let g = graph(&[50, 24], 0, &[3, 40, 24], &[3, 40]);
    let idx = Tensor::from_vec(indices(120, 50, 1), &[3, 40]).unwrap();
    agree_native(&gpu, &g, &[("dy", random(&[3, 40, 24], 2, -1.0, 1.0)), ("idx", idx)], Tol::rel(1e-5), &[OpKind::GatherBackward]);
    let g = graph(&[4, 9, 6], -2, &[4, 17, 6], &[17]);
    let idx = Tensor::from_vec(indices(17, 9, 3), &[17]).unwrap();
    agree_native(&gpu, &g, &[("dy", random(&[4, 17, 6], 4, -1.0, 1.0)), ("idx", idx)], Tol::rel(1e-5), &[OpKind::GatherBackward]);
}

#[test]
fn an_index_outside_the_table_is_an_error_naming_it() {
    let Some(gpu) = gpu() else { return };
    let g = graph(&[5, 3], 0, &[4, 3], &[4]);
    let mut c = gpu.compile(&g).unwrap();
    let idx = Tensor::from_vec(vec![0i64, 7, 1, 2], &[4]).unwrap();
    let err = c.run(&[("dy", random(&[4, 3], 5, -1.0, 1.0)), ("idx", idx)].iter().map(|(n, t)| (*n, t)).collect::<Vec<_>>()).unwrap_err().to_string();
    assert!(err.contains('7') && err.contains('5'), "{err}");
}
