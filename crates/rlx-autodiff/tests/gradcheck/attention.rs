//! Gradient cases for attention, the rotary embeddings and their backward ops (second
//! order). Operands that get no gradient by definition (masks, rope tables) or that a case
//! keeps out of the differentiated set come from integer inputs through a `Cast`.

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "causal self-attention, packed and single-sequence layouts",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[2,4,6]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[2,4,6]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[2,4,6]))()
            %3 = Attention(num_heads:2,head_dim:3,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%0, %1, %2)
            %4 = Input(name:"x",ty:(dtype:F64,shape:[3,6]))()
            %5 = Attention(num_heads:2,head_dim:3,v_head_dim:None,mask_kind:None,score_scale:None,attn_logit_softcap:None)(%4, %4, %4)
            return %3, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "head-major cross-attention: bottom-right causal, sliding window, unmasked",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[1,2,3,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[1,2,5,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[1,2,5,4]))()
            %3 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%0, %1, %2)
            %4 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:SlidingWindow(2),score_scale:None,attn_logit_softcap:None)(%0, %1, %2)
            %5 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:None,score_scale:None,attn_logit_softcap:None)(%0, %1, %2)
            return %3, %4, %5"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "attention with one differentiated operand at a time",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[2,3,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[2,3,4]))()
            %3 = Input(name:"units",ty:(dtype:I64,shape:[2,3,4]))()
            %4 = Cast(to:F64)(%3)
            %5 = Attention(num_heads:2,head_dim:2,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%0, %4, %4)
            %6 = Attention(num_heads:2,head_dim:2,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%4, %1, %4)
            %7 = Attention(num_heads:2,head_dim:2,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%4, %4, %2)
            return %5, %6, %7"#,
        domains: &[("units", Below(2))],
        tol: F64,
    },
    Case {
        name: "grouped-query attention: one KV head repeated for two query heads",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[2,2,3,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[2,1,3,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[2,1,3,4]))()
            %3 = Reshape(new_shape:[2,1,1,3,4])(%1)
            %4 = Expand(target_shape:[2,1,2,3,4])(%3)
            %5 = Reshape(new_shape:[2,2,3,4])(%4)
            %6 = Reshape(new_shape:[2,1,1,3,4])(%2)
            %7 = Expand(target_shape:[2,1,2,3,4])(%6)
            %8 = Reshape(new_shape:[2,2,3,4])(%7)
            %9 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%0, %5, %8)
            return %9"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "keys and values read at kv_rows (some twice): gradients go back to the rows read",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[3,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[5,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[5,4]))()
            %3 = Input(name:"rows",ty:(dtype:I64,shape:[4]))()
            %4 = Attention(num_heads:2,head_dim:2,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%0, %1, %2, %3)
            return %4"#,
        domains: &[("rows", Below(5))],
        tol: F64,
    },
    Case {
        name: "key-padding masks, float and Bool",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[3,2,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[3,3,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[3,3,4]))()
            %3 = Input(name:"keep",ty:(dtype:I64,shape:[3,3]))()
            %4 = Cast(to:F64)(%3)
            %5 = Attention(num_heads:2,head_dim:2,v_head_dim:None,mask_kind:Custom,score_scale:None,attn_logit_softcap:None)(%0, %1, %2, %4)
            %6 = Cast(to:Bool)(%3)
            %7 = Attention(num_heads:2,head_dim:2,v_head_dim:None,mask_kind:Custom,score_scale:None,attn_logit_softcap:None)(%0, %1, %2, %6)
            return %5, %7"#,
        domains: &[("keep", Below(2))],
        tol: F64,
    },
    Case {
        name: "additive biases, learned (through the decomposition) and fixed",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[1,2,3,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[1,2,4,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[1,2,4,4]))()
            %3 = Input(name:"bias",ty:(dtype:F64,shape:[2,3,4]))()
            %4 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:Bias,score_scale:None,attn_logit_softcap:None)(%0, %1, %2, %3)
            %5 = Input(name:"fixed_units",ty:(dtype:I64,shape:[3,4]))()
            %6 = Cast(to:F64)(%5)
            %7 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:Bias,score_scale:None,attn_logit_softcap:None)(%0, %1, %2, %6)
            return %4, %7"#,
        domains: &[("fixed_units", Below(3))],
        tol: F64,
    },
    Case {
        name: "score scale, softcap and a wider V, through the decomposition",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[2,3,4]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[2,5,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[2,5,6]))()
            %3 = Attention(num_heads:2,head_dim:2,v_head_dim:Some(3),mask_kind:Causal,score_scale:Some(0.8),attn_logit_softcap:Some(1.5))(%0, %1, %2)
            return %3"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "grouped KV heads (4 query heads, 2 KV heads; 4 over 1), through the decomposition",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[2,3,8]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[2,5,4]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[2,5,4]))()
            %3 = Attention(num_heads:4,head_dim:2,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%0, %1, %2)
            %4 = Input(name:"q4",ty:(dtype:F64,shape:[1,4,3,2]))()
            %5 = Input(name:"k4",ty:(dtype:F64,shape:[1,1,4,2]))()
            %6 = Attention(num_heads:4,head_dim:2,v_head_dim:None,mask_kind:None,score_scale:None,attn_logit_softcap:None)(%4, %5, %5)
            return %3, %6"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "rotary embeddings: both styles, partial rotary, every layout and table form",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,8]))()
            %1 = Input(name:"positions",ty:(dtype:I64,shape:[3,2]))()
            %2 = Cast(to:F64)(%1)
            %3 = Activation(kind:Cos)(%2)
            %4 = Activation(kind:Sin)(%2)
            %5 = Rope(head_dim:4,n_rot:4,style:NeoX)(%0, %3, %4)
            %6 = Rope(head_dim:4,n_rot:4,style:GptJ)(%0, %3, %4)
            %7 = Rope(head_dim:4,n_rot:2,style:NeoX)(%0, %3, %4)
            %8 = Rope(head_dim:4,n_rot:2,style:GptJ)(%0, %3, %4)
            %9 = Input(name:"x4",ty:(dtype:F64,shape:[2,3,2,4]))()
            %10 = Rope(head_dim:4,n_rot:4,style:GptJ)(%9, %3, %4)
            %11 = Input(name:"x2",ty:(dtype:F64,shape:[3,8]))()
            %12 = Reshape(new_shape:[6])(%3)
            %13 = Reshape(new_shape:[6])(%4)
            %14 = Rope(head_dim:4,n_rot:4,style:NeoX)(%11, %12, %13)
            return %5, %6, %7, %8, %10, %14"#,
        domains: &[("positions", Below(50))],
        tol: F64,
    },
    Case {
        name: "SAM2 axial rope over repeated grids",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,12,8]))()
            %1 = AxialRope2d(end_x:3,end_y:2,head_dim:4,num_heads:2,theta:100.0,repeat_factor:2)(%0)
            return %1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "rope backward, both styles",
        src: r#"%0 = Input(name:"dy",ty:(dtype:F64,shape:[2,3,8]))()
            %1 = Input(name:"positions",ty:(dtype:I64,shape:[3,2]))()
            %2 = Cast(to:F64)(%1)
            %3 = Activation(kind:Cos)(%2)
            %4 = Activation(kind:Sin)(%2)
            %5 = RopeBackward(head_dim:4,n_rot:4,style:NeoX)(%0, %3, %4)
            %6 = RopeBackward(head_dim:4,n_rot:2,style:GptJ)(%0, %3, %4)
            return %5, %6"#,
        domains: &[("positions", Below(50))],
        tol: F64,
    },
    Case {
        name: "attention backward ops, differentiated through their decompositions",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[1,2,3,2]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[1,2,4,2]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[1,2,4,2]))()
            %3 = Input(name:"dy",ty:(dtype:F64,shape:[1,2,3,2]))()
            %4 = AttentionBackward(num_heads:2,head_dim:2,mask_kind:Causal,wrt:Query)(%0, %1, %2, %3)
            %5 = AttentionBackward(num_heads:2,head_dim:2,mask_kind:SlidingWindow(2),wrt:Key)(%0, %1, %2, %3)
            %6 = AttentionBackward(num_heads:2,head_dim:2,mask_kind:None,wrt:Value)(%0, %1, %2, %3)
            %7 = Input(name:"keep",ty:(dtype:I64,shape:[1,4]))()
            %8 = Cast(to:F64)(%7)
            %9 = AttentionBackwardAll(num_heads:2,head_dim:2,mask_kind:Custom)(%0, %1, %2, %3, %8)
            %10 = Input(name:"bias",ty:(dtype:F64,shape:[3,4]))()
            %11 = AttentionBackwardAll(num_heads:2,head_dim:2,mask_kind:Bias)(%0, %1, %2, %3, %10)
            return %4, %5, %6, %9.0, %9.1, %9.2, %11.0, %11.1, %11.2"#,
        domains: &[("keep", Below(2))],
        tol: F64,
    },
    Case {
        name: "a char-level transformer block: embedding, norms, rope, causal attention, cross-entropy",
        src: r#"%0 = Input(name:"tokens",ty:(dtype:I64,shape:[1,4]))()
            %1 = Input(name:"embed",ty:(dtype:F64,shape:[5,8]))()
            %2 = Gather(axis:0)(%1, %0)
            %3 = Input(name:"ln_g",ty:(dtype:F64,shape:[8]))()
            %4 = Input(name:"ln_b",ty:(dtype:F64,shape:[8]))()
            %5 = LayerNorm(axis:-1,eps:0.00001)(%2, %3, %4)
            %6 = Input(name:"wq",ty:(dtype:F64,shape:[8,8]))()
            %7 = Input(name:"wk",ty:(dtype:F64,shape:[8,8]))()
            %8 = Input(name:"wv",ty:(dtype:F64,shape:[8,8]))()
            %9 = MatMul()(%5, %6)
            %10 = MatMul()(%5, %7)
            %11 = MatMul()(%5, %8)
            %12 = Input(name:"positions",ty:(dtype:I64,shape:[4,2]))()
            %13 = Cast(to:F64)(%12)
            %14 = Activation(kind:Cos)(%13)
            %15 = Activation(kind:Sin)(%13)
            %16 = Rope(head_dim:4,n_rot:4,style:NeoX)(%9, %14, %15)
            %17 = Rope(head_dim:4,n_rot:4,style:NeoX)(%10, %14, %15)
            %18 = Attention(num_heads:2,head_dim:4,v_head_dim:None,mask_kind:Causal,score_scale:None,attn_logit_softcap:None)(%16, %17, %11)
            %19 = Binary(op:Add)(%2, %18)
            %20 = Input(name:"rms_g",ty:(dtype:F64,shape:[8]))()
            %21 = Input(name:"rms_b",ty:(dtype:F64,shape:[8]))()
            %22 = RmsNorm(axis:-1,eps:0.000001,flatten_leading:true)(%19, %20, %21)
            %23 = Input(name:"wout",ty:(dtype:F64,shape:[8,5]))()
            %24 = MatMul()(%22, %23)
            %25 = Input(name:"labels",ty:(dtype:I64,shape:[4]))()
            %26 = SoftmaxCrossEntropyWithLogits(ignore_index:None)(%24, %25)
            return %26"#,
        domains: &[("tokens", Below(5)), ("positions", Below(50)), ("labels", Below(5))],
        tol: F64,
    },
];
