//! The formats of the arithmetic tasks by hand, and their splits.

use super::*;
use deltarl_schemas::seed::Rng;

#[test]
fn solutions_and_splits() {
    let p = Problem { a: 45, b: 7, c: 13 };
    assert_eq!(p.solution(None), "7*13=91 45+91=136 \\boxed{136}");
    assert_eq!(p.solution(Some((0, 2))), "7*13=93 45+93=138 \\boxed{138}");
    assert_eq!(p.answer(), 136);
    let train = problems(Split::Train, 500, 1);
    let test = problems(Split::Test, 100, 1);
    assert_eq!((train.len(), test.len()), (500, 100));
    assert!(train.iter().all(|p| split_of(p) == Split::Train));
    assert!(test.iter().all(|p| split_of(p) == Split::Test));
    assert_eq!(problems(Split::Test, 100, 1), test);
    for ch in p.solution(None).chars().chain("Q: 1+2*3=?\nA: ".chars()) {
        assert!(CHARS.contains(ch), "{ch:?} not in vocabulary");
    }
}

#[test]
fn the_steps_format_by_hand() {
    let p = Problem { a: 45, b: 7, c: 13 };
    let s = Task::Steps.solution(&p, None).unwrap();
    assert_eq!(
        s,
        "first 7*13=91. then 45+91=136. so the answer is \\boxed{136}"
    );
    // The error is carried through the restated quantity and the answer.
    assert_eq!(
        Task::Steps.solution(&p, Some((0, -1))).unwrap(),
        "first 7*13=90. then 45+90=135. so the answer is \\boxed{135}"
    );
    let chars = Task::Steps.chars();
    for ch in s.chars().chain("Q: 1+2*3=?\nA: ".chars()) {
        assert!(chars.contains(ch), "{ch:?} not in vocabulary");
    }
    // The compact task's ids are unchanged: its characters come first, in order.
    assert!(chars.starts_with(CHARS));
    assert_eq!(Task::Arith.vocab_size(), vocab_size());
    assert_eq!(
        Task::Steps.vocab_size(),
        vocab_size() + STEPS_EXTRA.chars().count()
    );
    // Every extra character is new (no duplicate tokens).
    assert!(STEPS_EXTRA.chars().all(|c| !CHARS.contains(c)));
    assert_eq!(Task::from_source("tiny-steps"), Some(Task::Steps));
    assert!(CHARS.starts_with("0123456789") && digit_ids().len() == 10);
    assert_eq!(Task::from_source("x.jsonl"), None);
    // 59 characters: the length the issue asks for (40-80 tokens).
    assert_eq!(s.chars().count(), 59);
}

#[test]
fn the_varied_format_by_hand() {
    let p = Problem { a: 45, b: 7, c: 13 };
    assert_eq!(
        Task::Varied.phrased(&p, None, &[1, 1, 0]).unwrap(),
        "to start 7*13=91. next 45+91=136. therefore the answer is \\boxed{136}"
    );
    // Phrasing 2 of each is tiny-steps' text; the default is the longest.
    assert_eq!(
        Task::Varied.phrased(&p, None, &[2; 3]).unwrap(),
        Task::Steps.solution(&p, None).unwrap()
    );
    let longest = Task::Varied.solution(&p, Some((1, 3))).unwrap();
    assert_eq!(
        longest,
        "start with 7*13=91. after that 45+91=139. therefore the answer is \\boxed{139}"
    );
    for pick in [[0, 0, 0], [1, 1, 1], [2, 2, 2], [0, 2, 1]] {
        let s = Task::Varied.phrased(&p, None, &pick).unwrap();
        assert!(s.len() <= longest.len(), "{s}");
        assert!(s.chars().all(|c| Task::Varied.chars().contains(c)), "{s}");
    }
    // One token decides each phrasing.
    for alts in VARIED_PHRASES {
        let firsts: std::collections::BTreeSet<char> =
            alts.iter().filter_map(|a| a.chars().next()).collect();
        assert_eq!(firsts.len(), alts.len(), "{alts:?}");
    }
    assert_eq!(Task::Varied.vocab_size(), Task::Steps.vocab_size());
    assert_eq!(Task::from_source("tiny-steps-varied"), Some(Task::Varied));
}

#[test]
fn warm_start_examples_draw_phrasings_for_the_varied_task_only() {
    let draw = |task: Task| {
        let mut rng = Rng::new(7);
        (0..60)
            .map(|_| warmstart_example(task, &mut rng, "Q: {question}\nA: ", 0.3).1)
            .collect::<Vec<_>>()
    };
    let steps = draw(Task::Steps);
    let varied = draw(Task::Varied);
    for (i, alts) in VARIED_PHRASES.iter().enumerate() {
        for alt in alts {
            let used = varied.iter().filter(|s| s.contains(alt)).count();
            assert!(used > 5, "phrase {i} {alt:?} used {used} times of 60");
        }
    }
    // The other tasks draw nothing more: their examples follow the same problem stream.
    let arith = draw(Task::Arith);
    for (a, s) in arith.iter().zip(&steps) {
        let boxed = |t: &str| t.rsplit_once("\\boxed").map(|x| x.1.to_string());
        assert_eq!(boxed(a), boxed(s));
    }
}

/// A response's labels as a string: `f` for a filler token, `.` for the rest.
fn filler_marks(task: Task, pieces: &[&str]) -> String {
    let labels = task.filler_tokens(pieces).unwrap();
    assert_eq!(labels.len(), pieces.len());
    labels.iter().map(|&l| if l { 'f' } else { '.' }).collect()
}

fn chars_of(s: &str) -> Vec<String> {
    s.chars().map(String::from).collect()
}

#[test]
fn the_filler_format_by_hand() {
    let p = Problem { a: 45, b: 7, c: 13 };
    // Letter indices 0, 1, 2, ... into "abdefhinorstwx", wrapping.
    let pick: Vec<usize> = (0..Task::Filler.filler_words() * FILLER_WORD_LEN).collect();
    let s = Task::Filler.phrased(&p, None, &pick).unwrap();
    let head = "first 7*13=91. then 45+91=136. so the answer is \\boxed{136}";
    // 128 letters: "abde fhin orst wxab defh inor stwx ..." (14 letters, 7 words = 2 cycles).
    let cycle = "abde fhin orst wxab defh inor stwx";
    let words = format!("{cycle} {cycle} {cycle} {cycle} abde fhin orst wxab");
    assert_eq!(s, format!("{head} {words}"));
    assert_eq!(words.split(' ').count(), 32);
    // The higher dose: the same picks carried on to its 80 words, 320 letters (22 cycles of
    // the 14 letters and 12 more, so it ends `abde fhin orst`).
    let pick80: Vec<usize> = (0..80 * FILLER_WORD_LEN).collect();
    let s80 = Task::Filler80.phrased(&p, None, &pick80).unwrap();
    let words80 = s80.strip_prefix(&format!("{head} ")).unwrap();
    assert_eq!(words80.split(' ').count(), 80);
    assert!(words80.starts_with(&words), "{words80}");
    assert!(words80.ends_with("abde fhin orst"), "{words80}");
    assert_eq!(
        Task::from_source("tiny-steps-filler-80"),
        Some(Task::Filler80)
    );
    assert_eq!(Task::Steps.filler_words(), 0);
    // Without the filler it is tiny-steps' solution, with or without an error.
    for wrong in [None, Some((0, 2)), Some((1, -3))] {
        let full = Task::Filler.solution(&p, wrong).unwrap();
        let bare = &full[..full.rfind('}').unwrap() + 1];
        assert_eq!(bare, Task::Steps.solution(&p, wrong).unwrap());
    }
    assert!(s.chars().all(|c| Task::Filler.chars().contains(c)), "{s}");
    assert_eq!(Task::Filler.vocab_size(), Task::Steps.vocab_size());
    assert_eq!(Task::from_source("tiny-steps-filler"), Some(Task::Filler));
    // Every filler letter is a vocabulary character, none of them twice.
    let letters: std::collections::BTreeSet<char> = FILLER_LETTERS.chars().collect();
    assert_eq!(letters.len(), FILLER_LETTERS.chars().count());
    assert!(letters.iter().all(|c| c.is_ascii_lowercase()));

    // The labels: every token after the answer's closing brace (the space before the
    // first word included), nothing of the steps, not the end of sequence.
    let chars = chars_of(&s);
    let mut pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    pieces.push("");
    let want = ".".repeat(head.len()) + &"f".repeat(1 + words.len()) + ".";
    assert_eq!(filler_marks(Task::Filler, &pieces), want);
    // Multi-character pieces: a piece that straddles the brace is not filler.
    let pieces = ["so \\boxed{13", "6} ab", "de fh", ""];
    assert_eq!(filler_marks(Task::Filler, &pieces), "..f.");
    // What the policy writes after a second complete box is filler, and that box is the
    // answer; an unclosed last box is skipped for the one before it (the verifier's rule).
    let pieces = ["\\boxed{1}", " x", "\\boxed{2}", " ab"];
    assert_eq!(filler_marks(Task::Filler, &pieces), "...f");
    let pieces = ["\\boxed{1}", " ab", "\\boxed{2"];
    assert_eq!(filler_marks(Task::Filler, &pieces), ".ff");
    // Nested braces close the box only at depth 0; no box at all: no filler.
    let pieces = ["\\boxed{\\frac{1}{2}", "}", " ab"];
    assert_eq!(filler_marks(Task::Filler, &pieces), "..f");
    assert_eq!(filler_marks(Task::Filler, &["first 7", "*13=91."]), "..");
    // tiny-steps is the dose 0: nothing to label, even after its box; tasks without filler
    // are refused.
    let steps = Task::Steps.solution(&p, None).unwrap() + " ab";
    let chars = chars_of(&steps);
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(filler_marks(Task::Steps, &pieces), ".".repeat(pieces.len()));
    assert_eq!(Task::Varied.filler_tokens(&pieces), None);
    assert_eq!(Task::Arith.filler_tokens(&pieces), None);
}

/// The dose: filler is over 70 % of the tokens of every solution at 32 words and over 85 %
/// at 80, the longest (largest numbers, an error that adds a digit) and the shortest
/// (smallest numbers), its end of sequence counted.
#[test]
fn filler_is_most_of_every_solution() {
    // (task, the least share, its configuration's `rollout.max_new_tokens`)
    for (task, least, new_tokens) in [(Task::Filler, 0.70, 288), (Task::Filler80, 0.85, 528)] {
        let share = |s: &str| {
            let chars = chars_of(s);
            let mut pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
            pieces.push("");
            let marks = filler_marks(task, &pieces);
            marks.matches('f').count() as f64 / marks.len() as f64
        };
        let (_, longest) = task.longest_example();
        let shortest = task.solution(&Problem { a: 0, b: 2, c: 2 }, None).unwrap();
        for s in [&longest, &shortest] {
            assert!(share(s) > least, "{task:?} {:.3}: {s}", share(s));
        }
        // And it fits the configuration's new tokens with its end of sequence, 16 short of
        // the limit where the overlong penalty starts.
        let with_eos = longest.chars().count() + 1;
        assert!(with_eos <= new_tokens - 16, "{task:?} {with_eos}");
    }
}

#[test]
fn warm_start_examples_of_the_filler_task_draw_every_letter() {
    let mut rng = Rng::new(7);
    let texts: Vec<String> = (0..40)
        .map(|_| warmstart_example(Task::Filler, &mut rng, "Q: {question}\nA: ", 0.3).1)
        .collect();
    let fillers: String = texts
        .iter()
        .map(|t| &t[t.rfind('}').unwrap() + 1..])
        .collect();
    for c in FILLER_LETTERS.chars() {
        let used = fillers.matches(c).count();
        // 40 examples x 128 letters, a 14th each: 365.7 expected, sd 18.5 (binomial);
        // the range is over 4.6 sd either side.
        assert!((280..=450).contains(&used), "{c:?} used {used} times");
    }
    assert!(texts.iter().all(|t| t.starts_with("first ")), "{texts:?}");
    let words = |task: Task, t: &str| {
        let n = t[t.rfind('}').unwrap() + 1..].split_whitespace().count();
        n == task.filler_words()
    };
    assert!(texts.iter().all(|t| words(Task::Filler, t)), "{texts:?}");
    let texts80: Vec<String> = (0..40)
        .map(|_| warmstart_example(Task::Filler80, &mut rng, "Q: {question}\nA: ", 0.3).1)
        .collect();
    assert!(
        texts80.iter().all(|t| words(Task::Filler80, t)),
        "{texts80:?}"
    );
    assert!(words(Task::Filler, &texts[0]) && !words(Task::Filler80, &texts[0]));
}
