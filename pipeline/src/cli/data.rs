//! `deltarl data prepare --recipe dapo-math --input F --out F.jsonl`: a published training
//! set as the paper trains on it (the recipe: `deltarl_data::recipe`), written as a JSONL
//! prompt file `data.source` reads, with a record of what was done beside it.
//!
//! The input is read in any layout `data.source` reads (verl's Parquet as the hub ships
//! it, JSONL), one Parquet batch at a time. The output and its record go to temporary
//! names and are renamed when complete, the record last, so an interrupted run leaves
//! either the previous files or none.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use deltarl_data::recipe::{Preparer, Recipe, RecipeSummary};
use serde::Serialize;

use crate::rewards::Routing;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: DataCommand,
}

#[derive(Debug, clap::Subcommand)]
enum DataCommand {
    /// Prepare a published training set: strip its own instruction, keep each problem
    /// once, drop problems whose copies disagree on the gold; print what was done.
    Prepare(PrepareArgs),
}

#[derive(Debug, clap::Args)]
struct PrepareArgs {
    /// Which training set the input is.
    #[arg(long, value_enum)]
    recipe: RecipeArg,
    /// The downloaded file: Parquet (verl's layout, as the hub ships it) or JSONL.
    #[arg(long)]
    input: PathBuf,
    /// The JSONL file to write (`data.source`); its record is written beside it as
    /// `<stem>.recipe.json`.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum RecipeArg {
    /// DAPO-Math-17k (BytedTsinghua-SIA/DAPO-Math-17k).
    DapoMath,
}

impl From<RecipeArg> for Recipe {
    fn from(r: RecipeArg) -> Recipe {
        match r {
            RecipeArg::DapoMath => Recipe::DapoMath,
        }
    }
}

/// The record written beside the output.
#[derive(Serialize)]
struct Record<'a> {
    input: String,
    input_sha256: String,
    output_sha256: String,
    #[serde(flatten)]
    summary: &'a RecipeSummary,
}

impl Args {
    pub fn run(self) -> Result<()> {
        match self.command {
            DataCommand::Prepare(a) => a.run(),
        }
    }
}

impl PrepareArgs {
    fn run(self) -> Result<()> {
        let recipe = Recipe::from(self.recipe);
        let input = self.input.display().to_string();
        if !self.input.is_file() {
            bail!("--input {input}: {}", crate::data::not_a_file(&self.input));
        }
        if self.out.extension().is_none_or(|e| e != "jsonl") {
            bail!(
                "--out {}: the prepared set is written as JSONL; name it *.jsonl",
                self.out.display()
            );
        }
        if let Some(why) = crate::data::unfit_output(&self.out, &[&self.input]) {
            bail!("--out {}: {why}", self.out.display());
        }
        // A record routed by its own fields only: `data.rewards` belongs to a run.
        let mut preparer = Preparer::new(recipe);
        crate::data::each_prompt(&self.input, &Routing::default(), |row, place| {
            preparer.push(row, place).map_err(anyhow::Error::from)
        })?;
        let (rows, summary) = preparer
            .finish()
            .with_context(|| format!("{input}: recipe {}", recipe.name()))?;

        let mut text = Vec::new();
        for r in &rows {
            let mut line = serde_json::json!({
                "id": r.id, "problem": r.problem, "answer": r.answer,
            });
            if let Some(source) = &r.data_source {
                line["data_source"] = source.as_str().into();
            }
            if let Some(system) = &r.system {
                line["system"] = system.as_str().into();
            }
            serde_json::to_writer(&mut text, &line)?;
            text.push(b'\n');
        }
        let record = Record {
            input: input.clone(),
            input_sha256: deltarl_schemas::sha256_file(&self.input)
                .with_context(|| format!("cannot read {input}"))?,
            output_sha256: deltarl_schemas::sha256_hex(&text),
            summary: &summary,
        };
        let record_path = self.out.with_extension("recipe.json");
        deltarl_schemas::atomic_write_bytes(&self.out, &text)?;
        deltarl_schemas::atomic_write_bytes(&record_path, &serde_json::to_vec_pretty(&record)?)?;
        print_summary(&summary, &self.out, &record_path);
        Ok(())
    }
}

fn print_summary(s: &RecipeSummary, out: &Path, record: &Path) {
    let i = &s.instruction;
    println!("recipe {}: {} rows read", s.recipe.name(), s.rows_read);
    println!(
        "  instruction: {} with prefix and suffix (stripped), {} prefix only, {} suffix only, \
         {} without; {} still mention it after stripping",
        i.both, i.prefix_only, i.suffix_only, i.neither, i.left
    );
    println!(
        "  {} distinct problems ({} repeated rows dropped)",
        s.distinct_problems, s.repeated_rows
    );
    println!(
        "  {} problems dropped: their copies carry different golds",
        s.conflicting_problems
    );
    for c in &s.conflict_examples {
        println!("    first at {}: golds {}", c.place, c.golds.join(" | "));
    }
    println!("wrote {} problems to {}", s.written, out.display());
    println!("record: {}", record.display());
}
