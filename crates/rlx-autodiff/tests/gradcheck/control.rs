//! Gradient cases for control flow and the extension ops: `If`, `While`, `Scan` and the scan
//! gradients through their unrolled decompositions, `CustomFn` through its `vjp_body` (or its
//! inlined `fwd_body`), and a registry `Custom` op through its registered rule.

use super::harness::{check, Case};
use rlx_autodiff::grad;
use rlx_autodiff::rules::register_custom_vjp;
use rlx_ir::ops::elementwise::BinaryOp;
use rlx_cpu::CpuBackend;
use rlx_runtime::{Session, Tensor};
use std::sync::Arc;
use rlx_opt::decompose::build::scalar;

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "both branches of If",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3]))()
            %1 = Input(name:"y",ty:(dtype:F64,shape:[3]))()
            %2 = Constant(ty:(dtype:Bool,shape:[1]),data:[1])()
            %3 = Constant(ty:(dtype:Bool,shape:[1]),data:[0])()
            %4 = If(then_branch:(nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"y",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Binary(op:Mul),inputs:[(node:0,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Activation(kind:Sin),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Add),inputs:[(node:2,output:0),(node:3,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Activation(kind:Exp),inputs:[(node:1,output:0)],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:4,output:0),(node:5,output:0)]),else_branch:(nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"y",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Activation(kind:Tanh),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Sub),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:1,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:3,output:0),(node:4,output:0)]))(%2, %0, %1)
            %5 = If(then_branch:(nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"y",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Binary(op:Mul),inputs:[(node:0,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Activation(kind:Sin),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Add),inputs:[(node:2,output:0),(node:3,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Activation(kind:Exp),inputs:[(node:1,output:0)],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:4,output:0),(node:5,output:0)]),else_branch:(nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"y",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Activation(kind:Tanh),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Sub),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:1,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:3,output:0),(node:4,output:0)]))(%3, %0, %1)
            return %4, %4.1, %5, %5.1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "bounded While (three of five iterations active)",
        src: r#"%0 = Constant(ty:(dtype:I32,shape:[1]),data:[0,0,0,0])()
            %1 = Input(name:"acc",ty:(dtype:F64,shape:[2,3]))()
            %2 = Input(name:"w",ty:(dtype:F64,shape:[3]))()
            %3 = While(cond:(nodes:[(op:Input(name:"i",ty:(dtype:I32,shape:[1])),inputs:[],outputs:[(dtype:I32,shape:[1])]),(op:Input(name:"acc",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"w",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Constant(ty:(dtype:I32,shape:[1]),data:[3,0,0,0]),inputs:[],outputs:[(dtype:I32,shape:[1])]),(op:Compare(op:Lt),inputs:[(node:0,output:0),(node:3,output:0)],outputs:[(dtype:Bool,shape:[1])])],outputs:[(node:4,output:0)]),body:(nodes:[(op:Input(name:"i",ty:(dtype:I32,shape:[1])),inputs:[],outputs:[(dtype:I32,shape:[1])]),(op:Input(name:"acc",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"w",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Constant(ty:(dtype:I32,shape:[1]),data:[1,0,0,0]),inputs:[],outputs:[(dtype:I32,shape:[1])]),(op:Binary(op:Add),inputs:[(node:0,output:0),(node:3,output:0)],outputs:[(dtype:I32,shape:[1])]),(op:Activation(kind:Tanh),inputs:[(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:5,output:0),(node:2,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Add),inputs:[(node:6,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])])],outputs:[(node:4,output:0),(node:7,output:0),(node:2,output:0)]),max_iterations:Some(5))(%0, %1, %2)
            return %3.1, %3.2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "Scan: trajectory, final carry, checkpoints",
        src: r#"%0 = Input(name:"init",ty:(dtype:F64,shape:[2]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[2]))()
            %2 = Input(name:"xs",ty:(dtype:F64,shape:[4,2]))()
            %3 = Scan(body:(nodes:[(op:Input(name:"carry",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"w",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"x_t",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:0,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Add),inputs:[(node:3,output:0),(node:2,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Activation(kind:Tanh),inputs:[(node:4,output:0)],outputs:[(dtype:F64,shape:[2])])],outputs:[(node:5,output:0)]),length:4,save_trajectory:true,num_bcast:1,num_xs:1,num_checkpoints:0)(%0, %1, %2)
            %4 = Scan(body:(nodes:[(op:Input(name:"carry",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"w",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"x_t",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:0,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Add),inputs:[(node:3,output:0),(node:2,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Activation(kind:Tanh),inputs:[(node:4,output:0)],outputs:[(dtype:F64,shape:[2])])],outputs:[(node:5,output:0)]),length:4,save_trajectory:false,num_bcast:1,num_xs:1,num_checkpoints:0)(%0, %1, %2)
            %5 = Scan(body:(nodes:[(op:Input(name:"carry",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"w",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"x_t",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:0,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Add),inputs:[(node:3,output:0),(node:2,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Activation(kind:Tanh),inputs:[(node:4,output:0)],outputs:[(dtype:F64,shape:[2])])],outputs:[(node:5,output:0)]),length:4,save_trajectory:true,num_bcast:1,num_xs:1,num_checkpoints:2)(%0, %1, %2)
            return %3, %4, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "scan gradients (second order)",
        src: r#"%0 = Input(name:"init",ty:(dtype:F64,shape:[2]))()
            %1 = Input(name:"trajectory",ty:(dtype:F64,shape:[4,2]))()
            %2 = Input(name:"upstream",ty:(dtype:F64,shape:[4,2]))()
            %3 = Input(name:"xs",ty:(dtype:F64,shape:[4,2]))()
            %4 = ScanBackward(body_vjp:(nodes:[(op:Input(name:"carry",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"x_t",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"d_output",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:0,output:0)],outputs:[(dtype:F64,shape:[2])])],outputs:[(node:3,output:0),(node:4,output:0)]),length:4,save_trajectory:true,num_xs:1,num_checkpoints:0,forward_body:None)(%0, %1, %2, %3)
            %5 = ScanBackwardXs(body_vjp:(nodes:[(op:Input(name:"carry",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"x_t",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"d_output",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:0,output:0)],outputs:[(dtype:F64,shape:[2])])],outputs:[(node:3,output:0),(node:4,output:0)]),length:4,save_trajectory:true,num_xs:1,num_checkpoints:0,forward_body:None,xs_idx:0)(%0, %1, %2, %3)
            %6 = Input(name:"last",ty:(dtype:F64,shape:[2]))()
            %7 = ScanBackward(body_vjp:(nodes:[(op:Input(name:"carry",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"x_t",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Input(name:"d_output",ty:(dtype:F64,shape:[2])),inputs:[],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:0,output:0)],outputs:[(dtype:F64,shape:[2])])],outputs:[(node:3,output:0),(node:4,output:0)]),length:4,save_trajectory:false,num_xs:1,num_checkpoints:0,forward_body:None)(%0, %1, %6, %3)
            return %4, %5, %7"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "CustomFn with a vjp_body and without",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3]))()
            %1 = Input(name:"w",ty:(dtype:F64,shape:[3]))()
            %2 = CustomFn(fwd_body:(nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"w",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Activation(kind:Exp),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])])],outputs:[(node:3,output:0)]),vjp_body:Some((nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"w",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Input(name:"primal_output",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"d_output",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:3,output:0),(node:2,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Activation(kind:Exp),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:3,output:0),(node:5,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Reduce(op:Sum,axes:[0],keep_dim:false),inputs:[(node:6,output:0)],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:4,output:0),(node:7,output:0)])),jvp_body:None,num_inputs:2)(%0, %1)
            %3 = Input(name:"b",ty:(dtype:F64,shape:[2,3]))()
            %4 = CustomFn(fwd_body:(nodes:[(op:Input(name:"a",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Input(name:"b",ty:(dtype:F64,shape:[2,3])),inputs:[],outputs:[(dtype:F64,shape:[2,3])]),(op:Activation(kind:Sin),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[2,3])]),(op:Binary(op:Mul),inputs:[(node:2,output:0),(node:1,output:0)],outputs:[(dtype:F64,shape:[2,3])])],outputs:[(node:3,output:0)]),vjp_body:None,jvp_body:None,num_inputs:2)(%0, %3)
            return %2, %4"#,
        domains: &[],
        tol: F64,
    },
];

/// A registry op `x³` with a CPU kernel and a registered VJP `3x²·ȳ`.
pub const CUSTOM: Case = Case {
    name: "registered Custom op",
    src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[4]))()
        %1 = Custom(name:"gradcheck.cube",num_inputs:1,attrs:[],outputs:[(dtype:F64,shape:[4])])(%0)
        return %1"#,
    domains: &[],
    tol: F64,
};

fn register_cube() {
    rlx_cpu::register_custom_kernel("gradcheck.cube", |_, ins, outs| {
        let x = ins[0].get::<f64>();
        for (y, x) in outs[0].get::<f64>().iter_mut().zip(x) {
            *y = x * x * x;
        }
        Ok(())
    });
    register_custom_vjp("gradcheck.cube", |_, v| {
        let (x, dy) = (v.inputs[0], v.ct(0)?);
        let three = scalar(v.g, v.g.ty(x).dtype, 3.0)?;
        let xx = v.g.binary(BinaryOp::Mul, x, x)?;
        let d = v.g.binary(BinaryOp::Mul, xx, three)?;
        Ok(vec![Some(v.g.binary(BinaryOp::Mul, d, dy)?)])
    });
}

#[test]
fn registered_custom_op_uses_its_rule() {
    register_cube();
    check(&CUSTOM).unwrap();
}

#[test]
fn unregistered_custom_op_passes_no_gradient() {
    rlx_cpu::register_custom_kernel("gradcheck.cube_without_vjp", |_, ins, outs| {
        let x = ins[0].get::<f64>();
        for (y, x) in outs[0].get::<f64>().iter_mut().zip(x) {
            *y = x * x * x;
        }
        Ok(())
    });
    let src = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3]))()
        %1 = Custom(name:"gradcheck.cube_without_vjp",num_inputs:1,attrs:[],outputs:[(dtype:F64,shape:[3])])(%0)
        %2 = Binary(op:Add)(%1, %0)
        %3 = Reduce(op:Sum,axes:[0],keep_dim:false)(%2)
        return %3"#;
    let g = rlx_ir::text::parse(src).unwrap();
    let gg = grad(&g, g.outputs()[0], &["x"]).unwrap();
    let mut c = Session::new(Arc::new(CpuBackend::new())).compile(&gg).unwrap();
    let x = Tensor::from_vec(vec![0.5f64, -1.0, 2.0], &[3]).unwrap();
    let out = c.run(&[("x", &x)]).unwrap();
    assert_eq!(out[0].to_f64_vec(), vec![0.5f64.powi(3) + 0.5 - 1.0 - 1.0 + 8.0 + 2.0]);
    assert_eq!(out[1].to_f64_vec(), vec![1.0; 3], "only the Add's direct path reaches x");
}

#[test]
fn custom_fn_gradient_comes_from_its_vjp_body() {
    // floor(x) with a straight-through vjp_body: the gradient is ȳ, not floor's zero.
    let src = r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[3]))()
        %1 = CustomFn(fwd_body:(nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Activation(kind:Floor),inputs:[(node:0,output:0)],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:1,output:0)]),vjp_body:Some((nodes:[(op:Input(name:"x",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])]),(op:Input(name:"d_output",ty:(dtype:F64,shape:[3])),inputs:[],outputs:[(dtype:F64,shape:[3])])],outputs:[(node:1,output:0)])),jvp_body:None,num_inputs:1)(%0)
        %2 = Reduce(op:Sum,axes:[0],keep_dim:false)(%1)
        return %2"#;
    let g = rlx_ir::text::parse(src).unwrap();
    let gg = grad(&g, g.outputs()[0], &["x"]).unwrap();
    let mut c = Session::new(Arc::new(CpuBackend::new())).compile(&gg).unwrap();
    let x = Tensor::from_vec(vec![0.5f64, -1.5, 2.25], &[3]).unwrap();
    let out = c.run(&[("x", &x)]).unwrap();
    assert_eq!(out[1].to_f64_vec(), vec![1.0; 3]);
}
