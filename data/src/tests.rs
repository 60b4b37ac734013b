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

#[test]
fn the_filler_format_by_hand() {
    let p = Problem { a: 45, b: 7, c: 13 };
    let pick: Vec<usize> = (0..FILLER_STEPS).map(|i| i % 4).collect();
    let s = Task::Filler.phrased(&p, None, &pick).unwrap();
    let block = "note this. done here. we do it. as shown. ";
    assert_eq!(
        s,
        format!(
            "first 7*13=91. {block}{block}then 45+91=136. {block}{block}so the answer is \\boxed{{136}}"
        )
    );
    // Without the fillers it is tiny-steps' solution, with or without an error.
    for wrong in [None, Some((0, 2)), Some((1, -3))] {
        let full = Task::Filler.solution(&p, wrong).unwrap();
        let mut bare = full.clone();
        for w in FILLER_PHRASES {
            bare = bare.replace(&format!("{w} "), "");
        }
        assert_eq!(bare, Task::Steps.solution(&p, wrong).unwrap());
    }
    // One token decides each filler's wording, and it is no connective's first character.
    let firsts: std::collections::BTreeSet<char> = FILLER_PHRASES
        .iter()
        .filter_map(|a| a.chars().next())
        .collect();
    assert_eq!(firsts.len(), FILLER_PHRASES.len());
    for c in ['f', 't', 's'] {
        assert!(!firsts.contains(&c), "{c}");
    }
    assert!(s.chars().all(|c| Task::Filler.chars().contains(c)), "{s}");
    assert_eq!(Task::Filler.vocab_size(), Task::Steps.vocab_size());
    assert_eq!(Task::from_source("tiny-steps-filler"), Some(Task::Filler));
    // The labels: every filler with its following space, nothing of the steps.
    let chars: Vec<String> = s.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    let labels = Task::Filler.filler_tokens(&pieces).unwrap();
    assert_eq!(labels.len(), pieces.len());
    let labelled: String = pieces
        .iter()
        .zip(&labels)
        .filter(|(_, &l)| l)
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(labelled, block.repeat(4));
    // tiny-steps is the dose 0: nothing to label; tasks without filler are refused.
    let steps = Task::Steps.solution(&p, None).unwrap();
    let chars: Vec<String> = steps.chars().map(String::from).collect();
    let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert!(Task::Steps
        .filler_tokens(&pieces)
        .unwrap()
        .iter()
        .all(|&l| !l));
    assert_eq!(Task::Varied.filler_tokens(&pieces), None);
    assert_eq!(Task::Arith.filler_tokens(&pieces), None);
}

/// The dose: filler is over 70 % of the characters of every solution, the longest (largest
/// numbers, an error that adds a digit, the longest wordings) and the shortest (smallest
/// numbers, the shortest wordings) alike.
#[test]
fn filler_is_most_of_every_solution() {
    let share = |s: &str| {
        let chars: Vec<String> = s.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        let labels = Task::Filler.filler_tokens(&pieces).unwrap();
        labels.iter().filter(|&&l| l).count() as f64 / labels.len() as f64
    };
    let (_, longest) = Task::Filler.longest_example();
    let small = Problem { a: 0, b: 2, c: 2 };
    let shortest_pick = [2, 3].repeat(FILLER_STEPS / 2);
    let shortest = Task::Filler.phrased(&small, None, &shortest_pick).unwrap();
    for s in [&longest, &shortest] {
        // The response's end-of-sequence token counts too: one more unlabelled token.
        let with_eos = share(s) * s.chars().count() as f64 / (s.chars().count() + 1) as f64;
        assert!(with_eos > 0.70, "{with_eos:.3}: {s}");
    }
    // And it fits the configuration's 256 new tokens, with its end of sequence.
    assert!(longest.chars().count() < 256, "{}", longest.chars().count());
}

#[test]
fn warm_start_examples_of_the_filler_task_draw_every_wording() {
    let mut rng = Rng::new(7);
    let texts: Vec<String> = (0..40)
        .map(|_| warmstart_example(Task::Filler, &mut rng, "Q: {question}\nA: ", 0.3).1)
        .collect();
    for w in FILLER_PHRASES {
        let used: usize = texts.iter().map(|t| t.matches(w).count()).sum();
        // 40 examples x 16 fillers, a quarter each: 160 expected.
        assert!((100..=220).contains(&used), "{w:?} used {used} times");
    }
    assert!(texts.iter().all(|t| t.starts_with("first ")), "{texts:?}");
}
