//! The Qwen3-family policy model on tch: blocks, Hugging Face checkpoints and generation.
//! `config.json`'s `model_type` picks the family: Qwen3, Qwen2 / Qwen2.5 (q/k/v biases
//! instead of q/k norms) or Llama 3 (neither, with llama3 rotary scaling); the rest of the
//! decoder is shared.
//!
//! The code reads like candle's `qwen3.rs` (numbered steps with shape comments), split here
//! into one small file per block. Tensor names match transformers' `Qwen3ForCausalLM`, so our checkpoints load
//! there and theirs load here.

mod attention;
mod checkpoint;
mod config;
mod dl;
mod error;
mod exp;
mod folder;
pub mod generate;
mod mlp;
mod model;
mod norm;
mod omp;
pub mod packed;
mod recompute;
mod rope;
pub mod roundoff;
pub mod sample;
mod sampling;
mod sessions;
mod shape;
mod shared;
pub mod slots;
mod step_attention;
mod stop;
pub mod synthetic;
mod teacher;
mod tensor_file;
mod tensor_layout;
mod tokenizer;

pub use checkpoint::{
    build, eos_ids, init_weights, load, random_policy, read_config, save, save_sharded,
    write_tensors, Policy, DEFAULT_SHARD_BYTES,
};
pub use config::{Dtype, Family, Llama3Rope, Qwen3Config};
pub use error::{Error, RequestProblem, Result};
pub use folder::check_folder;
pub use model::{layer_of, Packed, Qwen3};
pub use recompute::Checkpointed;
pub use shape::Shape;
pub use shared::Continuations;
pub use slots::KvCache;
pub use stop::StopScanner;
pub use tensor_file::TensorFile;
pub use tensor_layout::TensorLayout;
pub use tokenizer::Tokenizer;

/// The device to run on: the first CUDA device when present, else the CPU.
pub fn default_device() -> tch::Device {
    tch::Device::cuda_if_available()
}
