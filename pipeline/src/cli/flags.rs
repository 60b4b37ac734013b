//! Checks shared by several commands' flags.

/// The first item of a repeatable flag's values that is given again: a run, comparison or
/// variant named twice would be counted twice where each is one sample.
pub(crate) fn repeated<T: PartialEq>(items: &[T]) -> Option<&T> {
    items
        .iter()
        .enumerate()
        .find(|(i, x)| items[..*i].contains(x))
        .map(|(_, x)| x)
}

#[cfg(test)]
mod tests {
    use super::repeated;

    #[test]
    fn the_first_repeated_value_is_the_second_use_of_a_value() {
        assert_eq!(repeated::<u8>(&[]), None);
        assert_eq!(repeated(&["a", "b", "c"]), None);
        assert_eq!(repeated(&["a", "b", "c", "b", "a"]), Some(&"b"));
        assert_eq!(repeated(&[1, 1]), Some(&1));
    }
}
