//! What a server is asked for on its command line: the context a request may use and the
//! values of its arguments.

/// The positions one request may use (`--max-model-len`): the longest prompt and the
/// response, rounded up to a power of two so that a kept server restarts only when an
/// iteration's prompts need more, and never past the model's context.
pub fn max_model_len(longest_prompt: usize, max_new_tokens: usize, context: usize) -> usize {
    (longest_prompt + max_new_tokens)
        .next_power_of_two()
        .min(context)
}

/// Whether a server started with `--max-model-len` `started` (None: the model's context)
/// takes every request that one asked for `wanted` would.
pub fn covers(started: Option<usize>, wanted: Option<usize>) -> bool {
    match (started, wanted) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(s), Some(w)) => s >= w,
    }
}

/// The value a server argument is given in `args` (`--name V` or `--name=V`), the last
/// one when repeated, as vLLM's parser takes it.
pub fn server_arg<'a>(args: &'a [String], names: &[&str]) -> Option<&'a str> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.split_once('=') {
            Some((k, v)) if names.contains(&k) => found = Some(v),
            None if names.contains(&a.as_str()) => found = it.next().map(String::as_str),
            _ => {}
        }
    }
    found
}

/// The tensor-parallel size above 1 that server arguments ask for, if any
/// (`--tensor-parallel-size N`, `--tensor-parallel-size=N`, `-tp N`).
pub fn parallel_size(args: &[String]) -> Option<usize> {
    server_arg(args, &["--tensor-parallel-size", "-tp"])
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_longer_context_covers_a_shorter_one() {
        assert!(covers(None, None));
        assert!(covers(None, Some(64)));
        assert!(covers(Some(128), Some(64)));
        assert!(covers(Some(64), Some(64)));
        assert!(!covers(Some(32), Some(64)));
        assert!(!covers(Some(4096), None));
    }

    #[test]
    fn server_arguments_and_the_context_by_hand() {
        let args: Vec<String> = ["--gpu-memory-utilization", "0.85", "-tp=2", "--seed"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(
            server_arg(&args, &["--gpu-memory-utilization"]),
            Some("0.85")
        );
        assert_eq!(
            server_arg(&args, &["--tensor-parallel-size", "-tp"]),
            Some("2")
        );
        // A flag at the end has no value; one never given is None.
        assert_eq!(server_arg(&args, &["--seed"]), None);
        assert_eq!(server_arg(&args, &["--max-model-len"]), None);
        // 2,048 + 20,480 = 22,528 -> 32,768, Qwen3-8B's context; a shorter context caps it.
        assert_eq!(max_model_len(2048, 20480, 32768), 32768);
        assert_eq!(max_model_len(2048, 20480, 24576), 24576);
        assert_eq!(max_model_len(100, 28, 4096), 128);
    }

    #[test]
    fn tensor_parallel_sizes_are_read_in_every_spelling() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parallel_size(&args(&["--tensor-parallel-size", "4"])),
            Some(4)
        );
        assert_eq!(
            parallel_size(&args(&["--max-model-len", "9", "-tp=2"])),
            Some(2)
        );
        assert_eq!(parallel_size(&args(&["-tp", "1", "--seed", "3"])), None);
        assert_eq!(parallel_size(&args(&["--tensor-parallel-size"])), None);
        assert_eq!(parallel_size(&args(&["--max-model-len", "4096"])), None);
    }
}
