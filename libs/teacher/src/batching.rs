//! Forward passes bounded by rows and by tokens: with 20k-token responses a fixed row count
//! is either far too much memory for the long ones or far too little work for the short.

/// Splits `items` in order into consecutive chunks of at most `max_rows` items and, when
/// given, at most `max_tokens` tokens as the pass holds them: rows right-padded to the
/// chunk's longest, so `rows x longest` (`tokens(item)` each). An item longer than the
/// token budget gets a chunk of its own. Chunking never reorders, so results do not depend
/// on it beyond floating-point batching.
pub fn budget_chunks<T>(
    items: &[T],
    max_rows: usize,
    max_tokens: Option<usize>,
    tokens: impl Fn(&T) -> usize,
) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut longest) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = tokens(item);
        let rows_full = i - start >= max_rows.max(1);
        let padded = (i - start + 1) * longest.max(n);
        let tokens_full = max_tokens.is_some_and(|m| i > start && padded > m);
        if rows_full || tokens_full {
            out.push(&items[start..i]);
            (start, longest) = (i, 0);
        }
        longest = longest.max(n);
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_rows_and_tokens_in_order() {
        let lens = [5, 5, 20, 3, 3, 3, 3];
        let sizes = |c: Vec<&[usize]>| c.iter().map(|c| c.to_vec()).collect::<Vec<_>>();
        // Rows only.
        assert_eq!(
            sizes(budget_chunks(&lens, 3, None, |&n| n)),
            vec![vec![5, 5, 20], vec![3, 3, 3], vec![3]]
        );
        // A 10-token budget: the 20-token item stands alone.
        assert_eq!(
            sizes(budget_chunks(&lens, 8, Some(10), |&n| n)),
            vec![vec![5, 5], vec![20], vec![3, 3, 3], vec![3]]
        );
        // Padding counts: 2 + 9 and 9 + 1 tokens fit 12, but padded both are 2 x 9 = 18.
        assert_eq!(
            sizes(budget_chunks(&[2, 9, 1], 8, Some(12), |&n| n)),
            vec![vec![2], vec![9], vec![1]]
        );
        assert!(budget_chunks::<usize>(&[], 2, Some(4), |&n| n).is_empty());
    }
}
