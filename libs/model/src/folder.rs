//! What a model folder must hold, checked without loading a tensor: a configuration we
//! can build, a tokenizer, and every weight file its index names, each whole. A run's
//! configuration check calls it, so a folder the rollout would refuse is refused before
//! the run is recorded.

use std::io::Read;
use std::path::Path;

use crate::checkpoint::{file_err, weight_files};
use crate::{read_config, Qwen3Config, Result, Tokenizer};

/// Checks `dir` as [`crate::load`] would read it; the configuration when it holds.
pub fn check_folder(dir: &Path) -> Result<Qwen3Config> {
    let cfg = read_config(dir)?;
    let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    if tokenizer.vocab_size() > cfg.vocab_size {
        return Err(file_err(
            &dir.join("tokenizer.json"),
            format!(
                "{} tokens, but the model's vocab_size is {}",
                tokenizer.vocab_size(),
                cfg.vocab_size
            ),
        ));
    }
    for file in weight_files(dir)? {
        check_safetensors(&file)?;
    }
    Ok(cfg)
}

/// A safetensors file is its 8-byte header length, a JSON header naming each tensor's
/// byte range, and the data: whole when the file ends where the last range does.
fn check_safetensors(path: &Path) -> Result<()> {
    let err = |m: String| file_err(path, m);
    let mut f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let len = f.metadata().map_err(|e| err(e.to_string()))?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|_| err("shorter than a safetensors header".into()))?;
    let n = u64::from_le_bytes(n);
    if n > len.saturating_sub(8) {
        return Err(err(format!(
            "its header claims {n} bytes of a {len}-byte file"
        )));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(|e| err(e.to_string()))?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| err(format!("unreadable header: {e}")))?;
    let end = header
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()
        .unwrap_or(0);
    if 8 + n + end != len {
        return Err(err(format!(
            "{len} bytes, but its header describes {} (truncated or padded)",
            8 + n + end
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_whole_folder_passes_and_each_missing_or_cut_part_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let tokenizer = crate::synthetic::byte_level_bpe(300).unwrap();
        let p = crate::random_policy(d, &tokenizer, 300, true, 1, 1.0).unwrap();
        crate::save(&p, d).unwrap();
        check_folder(d).unwrap();

        let weights = d.join("model.safetensors");
        let bytes = std::fs::read(&weights).unwrap();
        std::fs::write(&weights, &bytes[..bytes.len() - 1]).unwrap();
        let e = check_folder(d).unwrap_err().to_string();
        assert!(
            e.contains("model.safetensors") && e.contains("truncated"),
            "{e}"
        );

        std::fs::remove_file(&weights).unwrap();
        let e = check_folder(d).unwrap_err().to_string();
        assert!(e.contains("no model.safetensors"), "{e}");

        std::fs::write(&weights, &bytes).unwrap();
        std::fs::remove_file(d.join("tokenizer.json")).unwrap();
        let e = check_folder(d).unwrap_err().to_string();
        assert!(e.contains("tokenizer.json"), "{e}");

        std::fs::write(d.join("config.json"), "{}").unwrap();
        let e = check_folder(d).unwrap_err().to_string();
        assert!(e.contains("config.json"), "{e}");
    }

    fn edit_config(d: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let path = d.join("config.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&path, v.to_string()).unwrap();
    }

    /// The adversarial run's model folders: each was read differently from transformers
    /// or failed late naming no file; each is now refused at the folder check naming
    /// config.json or tokenizer.json and the field (or read as transformers reads it).
    #[test]
    fn folders_transformers_reads_otherwise_are_refused_or_read_its_way() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let tokenizer = crate::synthetic::byte_level_bpe(300).unwrap();
        let p = crate::random_policy(d, &tokenizer, 300, true, 1, 1.0).unwrap();
        crate::save(&p, d).unwrap();
        let config = std::fs::read_to_string(d.join("config.json")).unwrap();
        let restore = || std::fs::write(d.join("config.json"), &config).unwrap();

        // Both spellings: transformers takes rope_parameters.rope_theta.
        edit_config(d, |v| {
            v["rope_theta"] = 10000.0.into();
            v["rope_parameters"] =
                serde_json::json!({"rope_type": "default", "rope_theta": 100000.0});
        });
        assert_eq!(check_folder(d).unwrap().rope_theta(), 100000.0);
        // A non-empty rope_scaling comes before rope_parameters (`rope_scaling or ...`).
        edit_config(d, |v| {
            v["rope_scaling"] = serde_json::json!({"rope_type": "default", "rope_theta": 5e5});
        });
        assert_eq!(check_folder(d).unwrap().rope_theta(), 5e5);
        restore();

        for (edit, says) in [
            (
                (|v: &mut serde_json::Value| {
                    v["rope_parameters"] = serde_json::json!({"rope_theta": "100000"})
                }) as fn(&mut serde_json::Value),
                "rope_parameters.rope_theta = \"100000\": must be a positive number",
            ),
            (
                |v| v["rope_theta"] = 0.0.into(),
                "rope_theta = 0: must be a positive number",
            ),
            (|v| v["rope_theta"] = (-5.0).into(), "rope_theta = -5"),
            (
                |v| v["rms_norm_eps"] = (-1e-6).into(),
                "rms_norm_eps = -0.000001",
            ),
            (|v| v["eos_token_id"] = "2".into(), "eos_token_id = \"2\""),
            (
                |v| v["eos_token_id"] = serde_json::json!([1, 300]),
                "eos_token_id = [1,300]",
            ),
        ] {
            restore();
            edit_config(d, edit);
            let e = check_folder(d).unwrap_err().to_string();
            assert!(e.contains("config.json") && e.contains(says), "{says}: {e}");
        }
        restore();
        check_folder(d).unwrap();

        // A tokenizer with no tokens.
        let tok = std::fs::read_to_string(d.join("tokenizer.json")).unwrap();
        let mut empty: serde_json::Value = serde_json::from_str(&tok).unwrap();
        empty["model"]["vocab"] = serde_json::json!({});
        empty["model"]["merges"] = serde_json::json!([]);
        empty["added_tokens"] = serde_json::json!([]);
        std::fs::write(d.join("tokenizer.json"), empty.to_string()).unwrap();
        let e = check_folder(d).unwrap_err().to_string();
        assert!(
            e.contains("tokenizer.json") && e.contains("vocabulary is empty"),
            "{e}"
        );
        std::fs::write(d.join("tokenizer.json"), tok).unwrap();

        // A tied config whose file carries a different lm_head.weight; the same one is fine.
        let weights = d.join("model.safetensors");
        let tensors = tch::Tensor::read_safetensors(&weights).unwrap();
        let embed = tensors
            .iter()
            .find(|(n, _)| n == "model.embed_tokens.weight")
            .map(|(_, t)| t.copy())
            .unwrap();
        for (head, refused) in [(embed.copy(), false), (&embed + 1e-3, true)] {
            let mut with: Vec<(String, tch::Tensor)> =
                tensors.iter().map(|(n, t)| (n.clone(), t.copy())).collect();
            with.push(("lm_head.weight".into(), head));
            tch::Tensor::write_safetensors(&with, &weights).unwrap();
            let loaded = crate::load(d, tch::Device::Cpu, crate::Dtype::F32);
            match refused {
                false => assert!(loaded.is_ok(), "{:?}", loaded.err()),
                true => {
                    let e = loaded.unwrap_err().to_string();
                    assert!(
                        e.contains("lm_head.weight") && e.contains("tie_word_embeddings"),
                        "{e}"
                    );
                }
            }
        }
    }
}
