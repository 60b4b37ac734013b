use anyhow::{Context, Result};
use deltarl_model::generate::{generate, Request, SampleSettings};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: crate::cli::model_arg::ModelArg,
    /// Prompt text (used as is; no template).
    #[arg(long)]
    prompt: String,
    #[arg(long, default_value_t = 64, value_parser = crate::config::ranges::new_tokens_arg)]
    max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0, value_parser = crate::config::ranges::temperature_arg)]
    temperature: f64,
    #[arg(long, default_value_t = 1.0, value_parser = crate::config::ranges::top_p_arg)]
    top_p: f64,
    #[arg(long, default_value_t = 0, value_parser = crate::config::ranges::top_k_arg)]
    top_k: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Load in bf16 instead of f32.
    #[arg(long)]
    bf16: bool,
}

impl Args {
    pub fn run(self, runs: &std::path::Path) -> Result<()> {
        let folder = self.model.folder(runs)?;
        let dtype = if self.bf16 {
            deltarl_model::Dtype::Bf16
        } else {
            deltarl_model::Dtype::F32
        };
        let policy = deltarl_model::load(&folder, deltarl_model::default_device(), dtype)
            .with_context(|| format!("cannot load {}", folder.display()))?;
        let ids = policy.tokenizer.encode(&self.prompt)?;
        let eos = policy.eos_ids();
        let s = SampleSettings::plain(self.temperature, self.max_new_tokens, eos)
            .truncated(self.top_p, self.top_k);
        let out = generate(
            &policy.model,
            &policy.tokenizer,
            &[Request {
                prompt_ids: ids,
                seeds: vec![self.seed],
            }],
            &s,
            &mut |_, _| {},
        )?;
        let tokens = out
            .first()
            .and_then(|g| g.first())
            .map(|s| s.tokens.clone())
            .unwrap_or_default();
        println!("{}", policy.tokenizer.decode(&tokens)?);
        Ok(())
    }
}
