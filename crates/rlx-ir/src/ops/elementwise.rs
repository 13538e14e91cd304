//! elementwise ops (OPS.md).

super::unspecified_ops!(
    Activation,
    Cast,
    StopGradient,
    Binary,
    Compare,
    Where,
    Fma,
    SplineActivation,
    ReluBackward,
    ActivationBackward,
    SplineActivationBackwardX,
    SplineActivationBackwardCoeff,
);
