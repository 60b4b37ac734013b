//! Forward passes bounded by rows and by tokens: with 20k-token responses a fixed row count
//! is either far too much memory for the long ones or far too little work for the short.

/// Splits `items` in order into consecutive chunks of at most `max_rows` items and, when
/// given, at most `max_tokens` tokens (`tokens(item)` each); an item longer than the token
/// budget gets a chunk of its own. Chunking never reorders, so results do not depend on it
/// beyond floating-point batching.
pub fn budget_chunks<T>(
    items: &[T],
    max_rows: usize,
    max_tokens: Option<usize>,
    tokens: impl Fn(&T) -> usize,
) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let n = tokens(item);
        let rows_full = i - start >= max_rows.max(1);
        let tokens_full = max_tokens.is_some_and(|m| i > start && used + n > m);
        if rows_full || tokens_full {
            out.push(&items[start..i]);
            (start, used) = (i, 0);
        }
        used += n;
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
        assert!(budget_chunks::<usize>(&[], 2, Some(4), |&n| n).is_empty());
    }
}
