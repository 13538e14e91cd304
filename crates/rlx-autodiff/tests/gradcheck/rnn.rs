//! Gradient cases for the recurrent and state-space families, differentiated through their
//! unrolled decompositions (OPS.md §13).

use super::harness::{Case, Domain::*};

const F64: f64 = 1e-6;

pub const CASES: &[Case] = &[
    Case {
        name: "bidirectional LSTM with its final states",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,2]))()
            %1 = Input(name:"w_ih",ty:(dtype:F64,shape:[16,2]))()
            %2 = Input(name:"w_hh",ty:(dtype:F64,shape:[16,2]))()
            %3 = Input(name:"b",ty:(dtype:F64,shape:[16]))()
            %4 = Lstm(hidden_size:2,num_layers:1,bidirectional:true,carry:false)(%0, %1, %2, %3)
            return %4, %4.1, %4.2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "two-layer LSTM from a carried state",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,2]))()
            %1 = Input(name:"w_ih",ty:(dtype:F64,shape:[16,2]))()
            %2 = Input(name:"w_hh",ty:(dtype:F64,shape:[16,2]))()
            %3 = Input(name:"b",ty:(dtype:F64,shape:[16]))()
            %4 = Input(name:"h0",ty:(dtype:F64,shape:[2,2,2]))()
            %5 = Input(name:"c0",ty:(dtype:F64,shape:[2,2,2]))()
            %6 = Lstm(hidden_size:2,num_layers:2,bidirectional:false,carry:true)(%0, %1, %2, %3, %4, %5)
            return %6, %6.1, %6.2"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "GRU and Elman RNN",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[2,3,2]))()
            %1 = Input(name:"gw_ih",ty:(dtype:F64,shape:[6,2]))()
            %2 = Input(name:"gw_hh",ty:(dtype:F64,shape:[6,2]))()
            %3 = Input(name:"gb_ih",ty:(dtype:F64,shape:[6]))()
            %4 = Input(name:"gb_hh",ty:(dtype:F64,shape:[6]))()
            %5 = Input(name:"h0",ty:(dtype:F64,shape:[1,2,2]))()
            %6 = Gru(hidden_size:2,num_layers:1,bidirectional:false,carry:true)(%0, %1, %2, %3, %4, %5)
            %7 = Input(name:"rw_ih",ty:(dtype:F64,shape:[4,2]))()
            %8 = Input(name:"rw_hh",ty:(dtype:F64,shape:[4,2]))()
            %9 = Input(name:"rb",ty:(dtype:F64,shape:[4]))()
            %10 = Rnn(hidden_size:2,num_layers:1,bidirectional:true,carry:false,relu:false)(%0, %7, %8, %9)
            return %6, %6.1, %10, %10.1"#,
        domains: &[],
        tol: F64,
    },
    Case {
        name: "selective and SSD scans",
        src: r#"%0 = Input(name:"x",ty:(dtype:F64,shape:[1,3,2]))()
            %1 = Input(name:"delta",ty:(dtype:F64,shape:[1,3,2]))()
            %2 = Input(name:"a",ty:(dtype:F64,shape:[2,2]))()
            %3 = Input(name:"b",ty:(dtype:F64,shape:[1,3,2]))()
            %4 = Input(name:"c",ty:(dtype:F64,shape:[1,3,2]))()
            %5 = SelectiveScan(state_size:2)(%0, %1, %2, %3, %4)
            %6 = Input(name:"xh",ty:(dtype:F64,shape:[1,3,2,2]))()
            %7 = Input(name:"dt",ty:(dtype:F64,shape:[1,3,2]))()
            %8 = Input(name:"a2",ty:(dtype:F64,shape:[2]))()
            %9 = Input(name:"b2",ty:(dtype:F64,shape:[1,3,2,2]))()
            %10 = Input(name:"c2",ty:(dtype:F64,shape:[1,3,2,2]))()
            %11 = Mamba2(head_dim:2,state_size:2)(%6, %7, %8, %9, %10)
            return %5, %11"#,
        domains: &[("delta", Positive), ("dt", Positive)],
        tol: F64,
    },
    Case {
        name: "gated delta rule",
        src: r#"%0 = Input(name:"q",ty:(dtype:F64,shape:[1,3,2,2]))()
            %1 = Input(name:"k",ty:(dtype:F64,shape:[1,3,2,2]))()
            %2 = Input(name:"v",ty:(dtype:F64,shape:[1,3,2,2]))()
            %3 = Input(name:"g",ty:(dtype:F64,shape:[1,3,2]))()
            %4 = Input(name:"beta",ty:(dtype:F64,shape:[1,3,2]))()
            %5 = GatedDeltaNet(state_size:2,carry_state:false,gate_per_channel:false)(%0, %1, %2, %3, %4)
            %6 = Input(name:"gc",ty:(dtype:F64,shape:[1,3,2,2]))()
            %7 = GatedDeltaNet(state_size:2,carry_state:false,gate_per_channel:true)(%0, %1, %2, %6, %4)
            return %5, %7"#,
        domains: &[],
        tol: F64,
    },
];
