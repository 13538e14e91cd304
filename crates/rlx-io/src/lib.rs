//! Reading model files for rlx: memory-mapped [safetensors](safetensors::SafetensorsFile),
//! [GGUF](gguf::GgufFile) (versions 2 and 3, every ggml block type rlx-ir decodes), and
//! [ONNX](onnx::import) models imported as rlx graphs.
//!
//! Tensors are borrowed from the map without copying where the caller takes bytes as stored,
//! and copied into a [`rlx_runtime::Tensor`] when loaded (widened or dequantised to F32 on
//! request). Malformed files yield an [`IoError`] naming the file and what was expected.

mod convert;
mod error;
pub mod gguf;
mod mapped;
pub mod onnx;
pub mod safetensors;

pub use error::{IoError, Result};
pub use gguf::{GgmlType, GgufFile, GgufTensor, GgufTensorInfo, GgufValue, PackedStrings};
pub use safetensors::{SafetensorsFile, SafetensorsInfo, TensorBytes};
