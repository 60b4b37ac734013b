//! Hugging Face checkpoint folders: `config.json`, `model.safetensors` (or a sharded
//! `model.safetensors.index.json`), `tokenizer.json`. Loading checks every tensor's name and
//! shape; saving writes the same layout atomically, so transformers opens it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tch::{nn, Device, Kind, Tensor};

use crate::tensor_layout::TensorLayout;
use crate::{Dtype, Error, Qwen3, Qwen3Config, Result, Tokenizer};

/// A loaded policy: variables, model, config and tokenizer.
pub struct Policy {
    pub vs: nn::VarStore,
    pub model: Qwen3,
    pub tokenizer: Tokenizer,
    pub dtype: Dtype,
}

impl Policy {
    /// The name of the first parameter (in name order) holding a NaN or an infinity, if
    /// any: a policy like that must never be saved as a result.
    pub fn first_non_finite(&self) -> Option<String> {
        let mut vars: Vec<(String, tch::Tensor)> = self.vs.variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        vars.into_iter()
            .find(|(_, t)| t.isfinite().all().int64_value(&[]) == 0)
            .map(|(name, _)| name)
    }

    /// Token ids that end a response: the config's `eos_token_id` plus the tokenizer's
    /// usual end tokens when present.
    pub fn eos_ids(&self) -> Vec<u32> {
        eos_ids(&self.model.config, &self.tokenizer)
    }
}

/// The tokens that end a response: the config's `eos_token_id`s and the tokenizer's end
/// tokens (`<eos>`, `<|endoftext|>`, `<|im_end|>`) when it has them.
pub fn eos_ids(config: &Qwen3Config, tokenizer: &Tokenizer) -> Vec<u32> {
    let mut eos = config.eos_ids();
    for t in ["<eos>", "<|endoftext|>", "<|im_end|>"] {
        if let Some(id) = tokenizer.token_id(t) {
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
    }
    eos
}

/// A small random Qwen3 policy for tests and examples: `tokenizer_json` is written to
/// `dir`, weights are `init_weights(seed)` times `scale` (larger spreads the logits).
pub fn random_policy(
    dir: &Path,
    tokenizer_json: &str,
    vocab_size: usize,
    tied: bool,
    seed: u64,
    scale: f64,
) -> Result<Policy> {
    let tok = dir.join("tokenizer.json");
    std::fs::write(&tok, tokenizer_json).map_err(|e| file_err(&tok, e.to_string()))?;
    let cfg: Qwen3Config = serde_json::from_value(serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": vocab_size, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "max_position_embeddings": 64, "tie_word_embeddings": tied,
        "rope_theta": 10000.0, "eos_token_id": 1
    }))
    .map_err(|e| Error::Config(e.to_string()))?;
    let mut p = build(&cfg, Tokenizer::from_file(&tok)?, Device::Cpu, Dtype::F32)?;
    init_weights(&mut p, seed);
    tch::no_grad(|| {
        for (_, mut v) in p.vs.variables() {
            let _ = v.g_mul_scalar_(scale);
        }
    });
    Ok(p)
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("config", &self.model.config)
            .field("tokenizer", &self.tokenizer)
            .finish()
    }
}

pub(crate) fn file_err(path: &Path, message: impl Into<String>) -> Error {
    Error::file(path, message)
}

/// Reads and validates `config.json` in `dir`.
pub fn read_config(dir: &Path) -> Result<Qwen3Config> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| file_err(&path, e.to_string()))?;
    let cfg: Qwen3Config =
        serde_json::from_str(&text).map_err(|e| file_err(&path, format!("invalid config: {e}")))?;
    cfg.validate().map_err(|e| file_err(&path, e.to_string()))?;
    Ok(cfg)
}

/// The safetensors files of a checkpoint (one file, or the shards of an index).
pub(crate) fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).map_err(|_| {
        file_err(
            dir,
            "no model.safetensors or model.safetensors.index.json in the model folder",
        )
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| file_err(&index, e.to_string()))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| file_err(&index, "no `weight_map` object"))?;
    let mut files: Vec<String> = map
        .values()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect();
    files.sort();
    files.dedup();
    Ok(files.into_iter().map(|f| dir.join(f)).collect())
}

/// Builds a model with fresh variables on `device`.
pub fn build(
    cfg: &Qwen3Config,
    tokenizer: Tokenizer,
    device: Device,
    dtype: Dtype,
) -> Result<Policy> {
    if tokenizer.vocab_size() > cfg.vocab_size {
        return Err(Error::Tokenizer {
            path: tokenizer.path.clone(),
            message: format!(
                "{} tokens, but the model's vocab_size is {}",
                tokenizer.vocab_size(),
                cfg.vocab_size
            ),
        });
    }
    let vs = nn::VarStore::new(device);
    // Building the layers draws their default initialisation from libtorch's global
    // generator; under the lock, so it cannot shift a seeded `init_weights` running on
    // another thread (the weights are overwritten afterwards either way).
    let model = {
        let _guard = torch_rng_lock();
        Qwen3::new(&vs.root(), cfg, device)?
    };
    let mut policy = Policy {
        vs,
        model,
        tokenizer,
        dtype: Dtype::F32,
    };
    if dtype == Dtype::Bf16 {
        policy.vs.bfloat16();
        policy.dtype = Dtype::Bf16;
    }
    Ok(policy)
}

/// libtorch's random generator is process-global: every draw from it in this crate happens
/// under this lock.
fn torch_rng_lock() -> std::sync::MutexGuard<'static, ()> {
    static TORCH_RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TORCH_RNG
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Initialises every weight as transformers does for a new model: normal(0, 0.02) for
/// matrices, ones for norms. Deterministic given `seed`.
pub fn init_weights(policy: &mut Policy, seed: u64) {
    // Held from seeding to the last draw, so concurrent model construction or
    // initialisation (parallel tests) cannot interleave draws with ours.
    let _guard = torch_rng_lock();
    tch::manual_seed(seed as i64);
    let mut vars: Vec<(String, Tensor)> = policy.vs.variables().into_iter().collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    tch::no_grad(|| {
        for (name, mut v) in vars {
            if name.ends_with("norm.weight") {
                let _ = v.fill_(1.0);
            } else {
                let r = Tensor::randn(v.size(), (Kind::Float, Device::Cpu)) * 0.02;
                v.copy_(&r.to_kind(v.kind()).to_device(v.device()));
            }
        }
    });
}

/// Loads a checkpoint folder onto `device` in `dtype`.
pub fn load(dir: &Path, device: Device, dtype: Dtype) -> Result<Policy> {
    let cfg = read_config(dir)?;
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    let policy = build(&cfg, tokenizer, device, dtype)?;
    let mut vars = policy.vs.variables();
    let mut seen = std::collections::HashSet::new();
    // A tied checkpoint may still carry lm_head.weight: kept to compare with the embedding.
    let mut tied_head: Option<(PathBuf, Tensor)> = None;
    for file in weight_files(dir)? {
        // One tensor in host memory at a time (an 8B policy is 16 GB of bf16).
        let tensors = crate::TensorFile::open(&file)?;
        for name in tensors.names() {
            let name = name.to_string();
            let Some(t) = tensors.read(&name)? else {
                continue;
            };
            let Some(var) = vars.get_mut(&name) else {
                if name == "lm_head.weight" {
                    tied_head = Some((file.clone(), t));
                    continue;
                }
                // Rotary caches are derived.
                if name.contains("rotary_emb") {
                    continue;
                }
                return Err(Error::Tensor {
                    path: file.clone(),
                    name,
                    message: format!(
                        "not a parameter of {} with this config",
                        cfg.family()?.architecture()
                    ),
                });
            };
            if var.size() != t.size() {
                return Err(Error::Tensor {
                    path: file.clone(),
                    name,
                    message: format!("shape {:?}, the config implies {:?}", t.size(), var.size()),
                });
            }
            if !matches!(t.kind(), Kind::Float | Kind::BFloat16 | Kind::Half) {
                return Err(Error::Tensor {
                    path: file.clone(),
                    name,
                    message: format!("unsupported dtype {:?}", t.kind()),
                });
            }
            tch::no_grad(|| var.copy_(&t.to_kind(var.kind()).to_device(device)));
            seen.insert(name);
        }
    }
    if let (Some((file, head)), Some(embed)) = (tied_head, vars.get("model.embed_tokens.weight")) {
        check_tied_head(&file, &head, embed)?;
    }
    let mut missing: Vec<&String> = vars.keys().filter(|k| !seen.contains(*k)).collect();
    missing.sort();
    if let Some(name) = missing.first() {
        return Err(Error::Tensor {
            path: dir.to_path_buf(),
            name: (*name).clone(),
            message: format!(
                "missing from the checkpoint ({} missing in all)",
                missing.len()
            ),
        });
    }
    Ok(policy)
}

/// With `tie_word_embeddings` the head is the embedding, and transformers ignores a stored
/// `lm_head.weight`; one that differs means the folder says two things, so it is named
/// rather than dropped without a word.
fn check_tied_head(file: &Path, head: &Tensor, embed: &Tensor) -> Result<()> {
    let err = |message: String| Error::Tensor {
        path: file.to_path_buf(),
        name: "lm_head.weight".into(),
        message,
    };
    if head.size() != embed.size() {
        return Err(err(format!(
            "shape {:?}, but config.json ties the head to model.embed_tokens.weight {:?}",
            head.size(),
            embed.size()
        )));
    }
    // Compared in the embedding's dtype, as it was loaded.
    let head = head.to_kind(embed.kind()).to_device(embed.device());
    let diff = (&head - embed).abs().max().double_value(&[]);
    if diff != 0.0 {
        return Err(err(format!(
            "differs from model.embed_tokens.weight (largest |difference| {diff:e}) while \
             config.json ties them (tie_word_embeddings = true): transformers would ignore it; \
             set tie_word_embeddings to false to use this head, or remove the tensor"
        )));
    }
    Ok(())
}

/// Writes named tensors as one safetensors file with `format = pt` metadata, atomically,
/// in name order. The header is computed from the tensors' shapes first; then each
/// tensor's bytes are copied to the host and written in turn, so the writer holds one
/// tensor's copy at a time, not the file (an 8B run's optimizer state is ~98 GB).
pub fn write_tensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let layout = TensorLayout::new(
        path,
        tensors.iter().map(|(n, t)| (n.clone(), t.kind(), t.size())),
    )?;
    let by_name: BTreeMap<&str, &Tensor> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let find = |name: &str| by_name.get(name).map(|t| t.shallow_clone());
    deltarl_schemas::atomic_write(path, |w| layout.write_in_order(w, find))
}

/// Writes `bytes` atomically through the one crash-safe writer (temporary name, fsync,
/// rename, directory fsync).
fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    Ok(deltarl_schemas::atomic_write_bytes(path, bytes)?)
}

/// Saves the policy as a Hugging Face folder: `model.safetensors`, `config.json`,
/// `tokenizer.json` (and the source's `tokenizer_config.json`, `special_tokens_map.json`,
/// `chat_template.jinja` and `generation_config.json` when it had them). Tied
/// embeddings are stored once, as transformers does.
pub fn save(policy: &Policy, dir: &Path) -> Result<()> {
    save_sharded(policy, dir, DEFAULT_SHARD_BYTES).map(|_| ())
}

/// transformers' default shard size (`max_shard_size="5GB"`).
pub const DEFAULT_SHARD_BYTES: u64 = 5_000_000_000;

/// [`save`] with the weights split into shards of at most `max_shard_bytes` (a tensor
/// larger than that gets a shard of its own), in name order: one `model.safetensors` when
/// everything fits, else `model-0000i-of-0000n.safetensors` and
/// `model.safetensors.index.json` (the layout transformers and vLLM read). Each shard is
/// copied to host memory and written before the next, so saving needs at most one shard
/// of extra host memory. Returns the weight files written (and the index).
pub fn save_sharded(policy: &Policy, dir: &Path, max_shard_bytes: u64) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| file_err(dir, e.to_string()))?;
    let mut named: Vec<(String, Tensor)> = policy
        .vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach()))
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let bytes = |t: &Tensor| (t.numel() * t.kind().elt_size_in_bytes()) as u64;
    let mut shards: Vec<Vec<(String, Tensor)>> = vec![Vec::new()];
    let mut used = 0u64;
    for (name, t) in named {
        let n = bytes(&t);
        if used > 0 && used + n > max_shard_bytes.max(1) {
            shards.push(Vec::new());
            used = 0;
        }
        used += n;
        if let Some(last) = shards.last_mut() {
            last.push((name, t));
        }
    }
    let mut written = Vec::new();
    if shards.len() == 1 {
        let path = dir.join("model.safetensors");
        write_tensors(&path, &shards[0])?;
        written.push(path);
    } else {
        let total: u64 = shards.iter().flatten().map(|(_, t)| bytes(t)).sum();
        let mut weight_map = serde_json::Map::new();
        for (i, shard) in shards.iter().enumerate() {
            let file = format!("model-{:05}-of-{:05}.safetensors", i + 1, shards.len());
            let path = dir.join(&file);
            write_tensors(&path, shard)?;
            for (name, _) in shard {
                weight_map.insert(name.clone(), file.clone().into());
            }
            written.push(path);
        }
        let index = serde_json::json!({
            "metadata": {"total_size": total},
            "weight_map": weight_map,
        });
        let path = dir.join("model.safetensors.index.json");
        let json = serde_json::to_vec_pretty(&index).map_err(|e| Error::Config(e.to_string()))?;
        atomic_write(&path, &json)?;
        written.push(path);
    }
    let mut cfg = policy.model.config.clone();
    cfg.torch_dtype = Some(policy.dtype.hf_name().into());
    let json = serde_json::to_vec_pretty(&cfg).map_err(|e| Error::Config(e.to_string()))?;
    atomic_write(&dir.join("config.json"), &json)?;
    let src_dir = policy.tokenizer.path.parent().map(Path::to_path_buf);
    // The tokenizer's files travel with every saved policy, the chat template included
    // (transformers 5 keeps it in chat_template.jinja, older versions in
    // tokenizer_config.json), so a policy is prompted as its base was.
    for name in [
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
        "generation_config.json",
    ] {
        let Some(src) = src_dir.as_ref().map(|d| d.join(name)) else {
            continue;
        };
        let dst = dir.join(name);
        if src.exists() && src != dst {
            let bytes = std::fs::read(&src).map_err(|e| file_err(&src, e.to_string()))?;
            atomic_write(&dst, &bytes)?;
        }
    }
    Ok(written)
}
