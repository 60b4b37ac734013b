//! Chat templates: the `chat_template` of a model folder's `tokenizer_config.json`,
//! rendered with minijinja (plus Python-compatible string methods) the way transformers'
//! `apply_chat_template(..., add_generation_prompt=True)` does.

use std::path::Path;

use anyhow::{bail, Context, Result};
use minijinja::{context, Environment};

/// A model's chat template and the special tokens it refers to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

fn token_str(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Object(o)) => o
            .get("content")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// Reads the template from `dir/tokenizer_config.json` (or `dir/chat_template.jinja`).
    pub fn from_model_dir(dir: &Path) -> Result<Self> {
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: serde_json::Value = match std::fs::read_to_string(&cfg_path) {
            Ok(t) => serde_json::from_str(&t)
                .with_context(|| format!("{}: invalid JSON", cfg_path.display()))?,
            Err(_) => serde_json::Value::Null,
        };
        // The file the template comes from, named in its errors.
        let mut file = cfg_path.clone();
        let source = match cfg.get("chat_template") {
            Some(serde_json::Value::String(s)) => s.clone(),
            // A list of named templates: take "default".
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template").and_then(|s| s.as_str()))
                .map(str::to_string)
                .with_context(|| {
                    format!(
                        "{}: `chat_template` has no \"default\" entry",
                        cfg_path.display()
                    )
                })?,
            _ => {
                let jinja = dir.join("chat_template.jinja");
                match std::fs::read_to_string(&jinja) {
                    Ok(s) => {
                        file = jinja;
                        s
                    }
                    Err(_) => bail!(
                        "{}: no `chat_template` (and no chat_template.jinja), but the configuration asks for one",
                        cfg_path.display()
                    ),
                }
            }
        };
        let chat = Self::new(
            &source,
            &token_str(cfg.get("bos_token")),
            &token_str(cfg.get("eos_token")),
        )
        .with_context(|| format!("{}", file.display()))?;
        // Rendered once, so a template that compiles but fails on use (an unknown filter,
        // a raised exception) fails here too. Without a system turn: some templates refuse
        // one, and only prompts that carry one need it.
        chat.render(None, "q")
            .with_context(|| format!("{}", file.display()))?;
        Ok(chat)
    }

    /// Compiles a template source.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<Self> {
        let mut env = Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| anyhow::anyhow!("invalid chat template: {e:#}"))?;
        Ok(ChatTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// The prompt for one user message (after a system message, when given), ending where
    /// the assistant's answer starts.
    pub fn render(&self, system: Option<&str>, user: &str) -> Result<String> {
        let t = self.env.get_template("chat")?;
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(context! { role => "system", content => s });
        }
        messages.push(context! { role => "user", content => user });
        t.render(context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => self.bos.clone(),
            eos_token => self.eos.clone(),
        })
        .map_err(|e| anyhow::anyhow!("cannot render the chat template: {e:#}"))
    }
}

/// Renders every problem through `template` and then as the user message of the chat
/// template of the model in `model_dir`, after its system turn when it has one (verl and
/// TRL message lists); returns the template that now applies to the rendered problems
/// (the identity, `{question}`).
pub fn apply(
    prompts: &mut [deltarl_schemas::PromptRow],
    template: &str,
    model_dir: &Path,
) -> Result<String> {
    let chat = ChatTemplate::from_model_dir(model_dir)?;
    for p in prompts.iter_mut() {
        let user = deltarl_schemas::render_template(template, &p.problem);
        p.problem = chat.render(p.system.as_deref(), &user)?;
    }
    Ok("{question}".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_chatml_template() {
        let src = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.strip() }}<|im_end|>\n{% endfor %}\
                   {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
        let t = ChatTemplate::new(src, "", "<|im_end|>").unwrap();
        assert_eq!(
            t.render(None, " 1+1? ").unwrap(),
            "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
        );
        // A system turn goes first, as apply_chat_template puts it.
        assert_eq!(
            t.render(Some("Be brief."), "1+1?").unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let err = ChatTemplate::from_model_dir(dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("chat_template"), "{err}");
    }

    #[test]
    fn a_broken_template_is_refused_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let jinja = dir.path().join("chat_template.jinja");
        // A syntax error, and a template that compiles but fails when rendered.
        for (source, says) in [
            (
                "{% for m in messages %}{{ m.content }",
                "invalid chat template",
            ),
            (
                "{{ messages | no_such_filter }}",
                "cannot render the chat template",
            ),
        ] {
            std::fs::write(&jinja, source).unwrap();
            let err = format!(
                "{:#}",
                ChatTemplate::from_model_dir(dir.path()).unwrap_err()
            );
            assert!(
                err.contains("chat_template.jinja") && err.contains(says),
                "{err}"
            );
        }
        std::fs::write(&jinja, "{% for m in messages %}{{ m.content }}{% endfor %}").unwrap();
        ChatTemplate::from_model_dir(dir.path()).unwrap();
    }
}
