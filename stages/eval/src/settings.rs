//! The eval stage's settings: everything it reads from the configuration. Their
//! serialisation is the stage's hash, so the field order and the fields skipped at their
//! defaults are part of every recorded run's identity.

use std::path::PathBuf;

use deltarl_code::CodeOptions;
use deltarl_model::Dtype;
use deltarl_schemas::skip::{is_one, is_zero};
use deltarl_schemas::Engine;
use deltarl_vllm::VllmOptions;
use serde::{Serialize, Serializer};

use crate::{Draw, Request, Sampling};

/// The eval stage's settings.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// The training data source: held-out problems exist for the built-in tasks only.
    pub data_source: deltarl_data::Source,
    pub problems: usize,
    pub samples: u32,
    pub temperature: f64,
    #[serde(skip_serializing_if = "is_one")]
    pub top_p: f64,
    #[serde(skip_serializing_if = "is_zero")]
    pub top_k: usize,
    pub sampling: Sampling,
    pub dtype: Dtype,
    /// Benchmark files (their contents are inputs of the stage, hashed as such).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub benchmarks: Vec<String>,
    /// Wrap benchmark prompts in the policy's chat template, as training prompts are.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub chat_template: bool,
    /// How code problems run (only in the hash when set: math runs keep theirs).
    #[serde(skip_serializing_if = "CodeOptions::is_default")]
    pub code: CodeOptions,
    /// The engine that draws the answers: the rollout's (`rollout.engine`). vLLM draws
    /// other answers than our engine from the same seeds, so it is hashed (when not native).
    #[serde(skip_serializing_if = "Engine::is_native")]
    pub engine: Engine,
    /// How vLLM is reached (`[rollout.vllm]`; the default with our engine). Only its extra
    /// server arguments can change answers, so only they are hashed (when any).
    #[serde(
        rename = "vllm_extra_args",
        skip_serializing_if = "no_extra_args",
        serialize_with = "extra_args"
    )]
    pub vllm: VllmOptions,
}

fn no_extra_args(v: &VllmOptions) -> bool {
    v.extra_args.is_empty()
}

fn extra_args<S: Serializer>(v: &VllmOptions, s: S) -> Result<S::Ok, S::Error> {
    v.extra_args.serialize(s)
}

impl Settings {
    /// How the stage draws its answers.
    pub fn draw(&self) -> Draw {
        Draw {
            samples: self.samples,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
        }
    }

    /// What the stage asks of the policy of iteration `iter` (0 = the base).
    pub fn request(&self, iter: u32) -> Request {
        self.sampling.at(self.draw(), iter)
    }

    /// The benchmark files, as inputs of the stage.
    pub fn files(&self) -> Vec<PathBuf> {
        self.benchmarks.iter().map(PathBuf::from).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings(engine: Engine, vllm: VllmOptions) -> Settings {
        Settings {
            data_source: deltarl_data::Source::parse("tiny-arith"),
            problems: 8,
            samples: 1,
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            sampling: Sampling {
                seed: 1,
                template: "Q: {question}\nA: ".into(),
                max_new_tokens: 16,
                stop: Vec::new(),
                max_batch_rows: 8,
                max_cache_tokens: None,
                session_rows: None,
                extract: deltarl_verify::Policy::Boxed,
                extract_fallbacks: Vec::new(),
            },
            dtype: Dtype::F32,
            benchmarks: Vec::new(),
            chat_template: false,
            code: CodeOptions::default(),
            engine,
            vllm,
        }
    }

    /// Our engine's settings hash as they did before the engine was a setting; vLLM's add
    /// the engine and the server arguments that can change answers, and nothing else of
    /// `[rollout.vllm]`.
    #[test]
    fn only_what_changes_answers_is_hashed() {
        let native = serde_json::to_value(settings(Engine::Native, VllmOptions::default()));
        let native = native.unwrap();
        assert!(native.get("engine").is_none(), "{native}");
        assert!(native.get("vllm_extra_args").is_none(), "{native}");
        let vllm = VllmOptions {
            python: "/somewhere/python".into(),
            extra_args: vec!["--enforce-eager".into()],
            port: 8123,
            ..VllmOptions::default()
        };
        let v = serde_json::to_value(settings(Engine::Vllm, vllm)).unwrap();
        assert_eq!(v["engine"], "vllm");
        assert_eq!(v["vllm_extra_args"], serde_json::json!(["--enforce-eager"]));
        assert!(!v.to_string().contains("somewhere"), "{v}");
        assert!(!v.to_string().contains("8123"), "{v}");
        let mut rest = v.as_object().unwrap().clone();
        rest.remove("engine");
        rest.remove("vllm_extra_args");
        assert_eq!(serde_json::Value::Object(rest), native);
    }

    /// Held-out answers are read as the rewards read them: a configuration that scores
    /// with the lenient policy (or a single fallback) grades "The answer is 7" right, the
    /// default (boxed) one wrong; the extraction is hashed only when it is not the default,
    /// so the files every boxed run already recorded keep their hashes.
    #[test]
    fn answers_are_extracted_as_the_rewards_extract_them() {
        use deltarl_verify::{Fallback, Policy};
        let response = "Tom has 3 + 4 = 7 apples. The answer is 7.";
        let boxed = settings(Engine::Native, VllmOptions::default());
        let json = serde_json::to_value(&boxed).unwrap();
        assert!(json["sampling"].get("extract").is_none(), "{json}");
        assert!(
            json["sampling"].get("extract_fallbacks").is_none(),
            "{json}"
        );
        let opts = boxed.request(1).extract;
        assert!(!deltarl_verify::grade(response, "7", &opts).1);
        assert!(deltarl_verify::grade("So \\boxed{7}", "7", &opts).1);

        let mut lenient = boxed.clone();
        lenient.sampling.extract = Policy::Lenient;
        let json = serde_json::to_value(&lenient).unwrap();
        assert_eq!(json["sampling"]["extract"], "lenient");
        let opts = lenient.request(1).extract;
        assert_eq!(opts, Policy::Lenient.options());
        assert!(deltarl_verify::grade(response, "7", &opts).1);
        assert!(!deltarl_verify::grade(response, "8", &opts).1);

        let mut fallback = boxed.clone();
        fallback.sampling.extract_fallbacks = vec![Fallback::AnswerIs];
        let json = serde_json::to_value(&fallback).unwrap();
        assert_eq!(
            json["sampling"]["extract_fallbacks"],
            serde_json::json!(["answer-is"])
        );
        let opts = fallback.request(1).extract;
        assert!(deltarl_verify::grade(response, "7", &opts).1);
        // Only the phrase was added: a bare closing number still earns nothing.
        assert!(!deltarl_verify::grade("Tom has 7", "7", &opts).1);
    }
}
