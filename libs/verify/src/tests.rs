use super::*;

fn eq(p: &str, g: &str) -> bool {
    equivalent(p, g)
}

#[test]
fn extraction_is_strict_and_balanced() {
    let o = ExtractOptions::default();
    let r = "so x = 3. \\boxed{\\frac{1}{2}} and then \\boxed{\\frac{\\sqrt{3}}{2}}";
    assert_eq!(extract(r, &o).unwrap().answer, "\\frac{\\sqrt{3}}{2}");
    assert!(extract("the answer is 5", &o).is_none());
    let lax = ExtractOptions {
        answer_is: true,
        ..o
    };
    assert_eq!(extract("The answer is 5.", &lax).unwrap().answer, "5");
    // A truncated last box falls back to the previous complete one.
    assert_eq!(
        extract("\\boxed{4} then \\boxed{5", &o).unwrap().answer,
        "4"
    );
    assert_eq!(extract("\\fbox{7}", &o).unwrap().answer, "7");
    let h = ExtractOptions { hashes: true, ..o };
    assert_eq!(extract("blah\n#### 1,234", &h).unwrap().answer, "1,234");
}

#[test]
fn numbers() {
    assert!(eq("0.5", "\\frac{1}{2}"));
    assert!(eq("\\dfrac12", "1/2"));
    assert!(eq("1,000", "1000"));
    assert!(eq("3\\frac{1}{2}", "7/2"));
    assert!(eq("1.5e3", "1500"));
    assert!(eq("1.5\\times10^{3}", "1500"));
    assert!(eq("50\\%", "50"));
    assert!(eq("\\$18.90", "18.9"));
    assert!(eq("90^\\circ", "90"));
    assert!(eq("12\\text{ cm}", "12"));
    assert!(eq("-7", "-7."));
    assert!(!eq("0.333", "\\frac{1}{3}"));
    assert!(!eq("12", "13"));
    let big = "9".repeat(300);
    assert!(eq(&big, &big));
}

#[test]
fn expressions_and_structures() {
    assert!(eq("\\frac{\\sqrt{2}}{2}", "\\sqrt2/2"));
    assert!(eq("2\\pi", "\\pi*2"));
    assert!(eq("x^2+2x+1", "(x+1)^2"));
    assert!(!eq("x^2+1", "(x+1)^2"));
    assert!(eq("x = 3", "3"));
    assert!(eq("(1, 2)", "(1,2)"));
    assert!(!eq("(1,2)", "(2,1)"));
    assert!(eq("\\{1, 2\\}", "\\{2,1\\}"));
    assert!(!eq("[1, 2)", "[1,2]"));
    assert!(eq("(-\\infty, 3]", "(-\\infty,3]"));
    assert!(eq("\\text{(B)}", "B"));
    assert!(!eq("A", "B"));
}

#[test]
fn pathological_inputs_are_bounded() {
    let o = ExtractOptions::default();
    let huge = "a".repeat(1 << 20) + "\\boxed{5}";
    assert_eq!(grade(&huge, "5", &o), (Some("5".into()), true));
    let nested = "{".repeat(10_000) + &"}".repeat(10_000);
    assert!(!verify(&format!("\\boxed{{{nested}}}"), "1"));
    assert!(!eq("10^{10^{10}}", "1"));
    let million = "7".repeat(1_000_000);
    assert!(!eq(&million, &million));
    assert!(!eq(&"(".repeat(5000), "1"));
    assert!(!eq("1/0", "1"));
    // The lenient fallbacks scan the response once each: headings, final sentences,
    // dollar signs and digit groups by the hundred thousand finish (a quadratic scan of
    // these megabyte inputs would not).
    for pathological in [
        "Answer \\[ 1\n".repeat(100_000),
        "$".repeat(1 << 20),
        "1,".repeat(500_000) + " apples.",
        "The value is $x$. ".repeat(60_000),
        "answer\n".repeat(150_000) + "\\( 2",
    ] {
        assert!(!verify_with(&pathological, "7", Policy::Lenient));
    }
}

#[test]
fn thread_safe() {
    let handles: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                (0..200).all(|k| verify(&format!("\\boxed{{{}}}", k + i), &format!("{}", k + i)))
            })
        })
        .collect();
    assert!(handles.into_iter().all(|h| h.join().unwrap()));
}

/// Answers written the way others write them (the kinds graders meet in model output), each with the verdict a
/// careful grader intends.
#[test]
fn answers_others_write() {
    let lenient = |p: &str, g: &str| verify_with(p, g, Policy::Lenient);
    // Extraction: answer phrases without a box, under the lenient policy only.
    for r in [
        "We add them up. The answer is 12.",
        "Final Answer: 12",
        "Final Answer: The final answer is $12$. I hope it is correct.",
        "so we get\n**Answer:** 12",
        "answer: $12$",
    ] {
        assert!(lenient(r, "12"), "{r}");
        assert!(!verify(r, "12"), "boxed policy credits {r}");
    }
    assert!(lenient("after 3 steps we stop at 7", "7"));
    // A box still wins over a phrase.
    assert!(!lenient("The answer is 12, so \\boxed{13}", "12"));
    // Labelled answers and chains against a bare gold.
    assert!(eq("x = 11", "11"));
    assert!(eq("f(x) = 1", "1"));
    assert!(eq("(p,q) = (3,2)", "(3,2)"));
    assert!(eq("x_1 = 4", "4"));
    assert!(eq("x = 5+5+1 = 11", "11"));
    assert!(!eq("2x = 4", "4"));
    // Normalisation: the longer command first.
    assert!(eq("x \\geq 2", "x >= 2"));
    assert!(eq("x \\leq 2", "x\\le 2"));
    assert!(eq("x \\lt 2", "x < 2"));
    assert!(eq("\\cfrac{1}{2}", "0.5"));
    assert!(eq("\\textnormal{(B)}", "B"));
    assert!(eq("14{,}916", "14916"));
    assert!(eq("28 percent", "28"));
    assert!(eq("28 pct", "28\\%"));
    // Not a thousands separator: two answers.
    assert!(!eq("32, 349", "32349"));
}

#[test]
fn matrix_arithmetic_is_evaluated_only_where_unambiguous() {
    let m = |rows: &str| format!("\\begin{{pmatrix}}{rows}\\end{{pmatrix}}");
    let (a, b, i) = (m("1&2\\\\3&4"), m("5&6\\\\7&8"), m("1&0\\\\0&1"));
    // By hand: A + B = (6,8;10,12), A - B = (-4,-4;-4,-4), 3I - A = (2,-2;-3,-1),
    // AB = (19,22;43,50), BA = (23,34;31,46), A (1;1) = (3;7), 1/2 A = (1/2,1;3/2,2).
    assert!(eq(&format!("{a} + {b}"), &m("6&8\\\\10&12")));
    assert!(eq(&format!("{a} - {b}"), &m("-4&-4\\\\-4&-4")));
    assert!(eq(&format!("3{i} - {a}"), &m("2&-2\\\\-3&-1")));
    assert!(eq(&format!("{a}{b}"), &m("19&22\\\\43&50")));
    assert!(eq(&format!("{a} \\cdot {b}"), &m("19&22\\\\43&50")));
    assert!(eq(&format!("{b}{a}"), &m("23&34\\\\31&46")));
    assert!(!eq(&format!("{b}{a}"), &m("19&22\\\\43&50")));
    assert!(eq(&format!("{a}{}", m("1\\\\1")), &m("3\\\\7")));
    assert!(eq(&format!("\\frac{{1}}{{2}}{a}"), &m("0.5&1\\\\1.5&2")));
    // Products before sums: A + A B = (20,24;46,54), not (A + A) B = (38,44;86,100).
    assert!(eq(&format!("{a} + {a}{b}"), &m("20&24\\\\46&54")));
    assert!(!eq(&format!("{a} + {a}{b}"), &m("38&44\\\\86&100")));
    // The invariant: an evaluated expression equals its value written out, and A - A = 0.
    assert!(eq(&format!("{a} - {a}"), &m("0&0\\\\0&0")));
    // Not evaluated: a symbol before it, a power after it, mismatched shapes, symbols inside.
    assert!(!eq(&format!("x - {i}"), &m("-1&0\\\\0&-1")));
    assert!(!eq(&format!("{a} + {a}^T"), &m("2&5\\\\5&8")));
    assert!(!eq(&format!("{a} + {}", m("1&2")), &m("2&4\\\\3&4")));
    assert!(!eq(
        &format!("{} + {i}", m("a&0\\\\0&b")),
        &m("a+1&0\\\\0&b+1")
    ));
}

#[test]
fn matrix_arithmetic_is_bounded() {
    // A chain of 8 products of 2x2 matrices of 50-digit numbers (1,960 bytes, under
    // MAX_INPUT): the product has over 400 digits, so the digits cap (`Rational::fits`)
    // stops it and it is left as written, not multiplied out.
    let big = "9".repeat(50);
    let m = format!("\\begin{{pmatrix}}{big}&{big}\\\\{big}&{big}\\end{{pmatrix}}");
    let chain = m.repeat(8);
    assert!(chain.len() < MAX_INPUT, "{}", chain.len());
    let start = std::time::Instant::now();
    assert!(!eq(&chain, &m));
    // A generous bound (the call takes milliseconds): it only catches a runaway.
    assert!(start.elapsed().as_secs() < 10, "{:?}", start.elapsed());
    // A column of 300 times a row of 300 would be 90,000 entries: over MAX_CELLS, so both
    // stay as written; a column of 3 times a row of 3 is evaluated (9 entries).
    let cells = |n: usize| vec![vec!["1".to_string()]; n];
    let row = |n: usize| vec![vec!["1".to_string(); n]];
    for (n, evaluated) in [(300, false), (3, true)] {
        let (text, matrices) = crate::matrix::fold(
            crate::matrix::Pieces {
                text: vec!["", "", ""],
                matrices: vec![cells(n), row(n)],
            },
            &|c: &str| crate::number::Rational::parse(c),
        );
        assert_eq!(matrices.len(), if evaluated { 1 } else { 2 }, "n = {n}");
        assert_eq!(text.len(), matrices.len() + 1);
    }
}
