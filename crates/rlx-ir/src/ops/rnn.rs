//! rnn ops (OPS.md).

super::unspecified_ops!(
    Lstm,
    Gru,
    Rnn,
);
