//! The per-response results of a pass as bytes, for processes that each hold some
//! responses' vectors to exchange them ([`crate::Vectors::share`]): every f64 sent as its
//! eight little-endian bytes, so each process adds the same bits in the same fixed order
//! and N processes compute what one does.

use crate::{Error, Result};

/// A pass's per-response result, as bytes and back.
pub(crate) trait Wire: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn take(input: &mut &[u8]) -> Result<Self>;
}

fn short() -> Error {
    Error::Input("a result exchanged between processes ends early".into())
}

fn take_bytes<const N: usize>(input: &mut &[u8]) -> Result<[u8; N]> {
    let (head, rest) = input.split_first_chunk::<N>().ok_or_else(short)?;
    *input = rest;
    Ok(*head)
}

impl Wire for u64 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn take(input: &mut &[u8]) -> Result<Self> {
        Ok(u64::from_le_bytes(take_bytes(input)?))
    }
}

impl Wire for f64 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn take(input: &mut &[u8]) -> Result<Self> {
        Ok(f64::from_le_bytes(take_bytes(input)?))
    }
}

impl Wire for Vec<f64> {
    fn put(&self, out: &mut Vec<u8>) {
        (self.len() as u64).put(out);
        for x in self {
            x.put(out);
        }
    }
    fn take(input: &mut &[u8]) -> Result<Self> {
        let n = usize::try_from(u64::take(input)?).map_err(|_| short())?;
        if input.len() / 8 < n {
            return Err(short());
        }
        (0..n).map(|_| f64::take(input)).collect()
    }
}

impl<T: Wire> Wire for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(t) => {
                out.push(1);
                t.put(out);
            }
        }
    }
    fn take(input: &mut &[u8]) -> Result<Self> {
        match take_bytes::<1>(input)?[0] {
            0 => Ok(None),
            1 => T::take(input).map(Some),
            b => Err(Error::Input(format!(
                "a result exchanged between processes has option tag {b}"
            ))),
        }
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn take(input: &mut &[u8]) -> Result<Self> {
        Ok((A::take(input)?, B::take(input)?))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn results_cross_as_the_same_bits_and_a_cut_message_is_refused() {
        let v: (Option<(f64, Vec<f64>)>, Vec<f64>) = (
            Some((0.1 + 0.2, vec![-0.0, f64::MIN_POSITIVE, 1e300, 1.0 / 3.0])),
            vec![],
        );
        let mut b = Vec::new();
        v.put(&mut b);
        // Tag, weight, length, four values, length: 1 + 8 + 8 + 32 + 8 bytes.
        assert_eq!(b.len(), 57);
        let back = <(Option<(f64, Vec<f64>)>, Vec<f64>)>::take(&mut b.as_slice()).unwrap();
        let bits = |x: &(Option<(f64, Vec<f64>)>, Vec<f64>)| {
            let (w, s) = x.0.clone().unwrap();
            (
                w.to_bits(),
                s.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            )
        };
        assert_eq!(bits(&back), bits(&v));
        let none: Option<(f64, Vec<f64>)> = None;
        let mut b = Vec::new();
        none.put(&mut b);
        assert_eq!(b, vec![0]);
        // Cut anywhere, or a length beyond the bytes: an error, never a panic.
        let mut full = Vec::new();
        v.put(&mut full);
        for cut in 0..full.len() {
            assert!(<(Option<(f64, Vec<f64>)>, Vec<f64>)>::take(&mut &full[..cut]).is_err());
        }
        let mut huge = Vec::new();
        u64::MAX.put(&mut huge);
        assert!(Vec::<f64>::take(&mut huge.as_slice()).is_err());
    }
}
