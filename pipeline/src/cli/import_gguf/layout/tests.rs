//! The layout check on files built here byte by byte: a whole file passes in versions 1
//! to 3; a file cut anywhere, and each corrupt field, is refused by name.
#![allow(clippy::unwrap_used)]
use super::*;

/// A GGUF file of `version`: three metadata entries (a string array, an f32 array, then
/// the alignment, 64) and two tensors, `a` (F32, 2 x 4: 32 bytes at offset 0) and `b`
/// (type `b_type`, 64 elements at offset 64), then 104 bytes of data: as Q4_1, `b` is 2
/// blocks of 20 bytes and ends exactly there.
fn file(version: u32, b_type: u32) -> Vec<u8> {
    let mut f = b"GGUF".to_vec();
    f.extend(version.to_le_bytes());
    let size = |f: &mut Vec<u8>, n: u64| {
        if version == 1 {
            f.extend((n as u32).to_le_bytes());
        } else {
            f.extend(n.to_le_bytes());
        }
    };
    let string = |f: &mut Vec<u8>, s: &str| {
        size(f, s.len() as u64);
        f.extend(s.as_bytes());
    };
    size(&mut f, 2);
    size(&mut f, 3);
    string(&mut f, "tokenizer.ggml.tokens");
    f.extend(9u32.to_le_bytes());
    f.extend(8u32.to_le_bytes());
    size(&mut f, 2);
    string(&mut f, "hi");
    string(&mut f, "there");
    string(&mut f, "tokenizer.ggml.scores");
    f.extend(9u32.to_le_bytes());
    f.extend(6u32.to_le_bytes());
    size(&mut f, 3);
    for x in [0.5f32, -1.0, 2.0] {
        f.extend(x.to_le_bytes());
    }
    string(&mut f, "general.alignment");
    f.extend(4u32.to_le_bytes());
    f.extend(64u32.to_le_bytes());
    for (name, dims, ty, offset) in [("a", &[4u64, 2][..], 0u32, 0u64), ("b", &[64], b_type, 64)] {
        string(&mut f, name);
        f.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            size(&mut f, *d);
        }
        f.extend(ty.to_le_bytes());
        f.extend(offset.to_le_bytes());
    }
    let data = f.len().div_ceil(64) * 64;
    f.resize(data + 64 + 40, 0x5a);
    f
}

fn read(bytes: &[u8]) -> Result<Layout, String> {
    let version = header_version(bytes)?;
    let mut r = Reader {
        r: {
            // Past the 8 header bytes, as `check` leaves the file.
            let mut c = std::io::Cursor::new(bytes);
            c.set_position(8);
            c
        },
        pos: 8,
        len: bytes.len() as u64,
        version,
    };
    layout(&mut r).map_err(|e| match e {
        Bad::Io(e) => format!("io: {e}"),
        Bad::Layout(why) => why,
    })
}

#[test]
fn a_whole_file_passes_in_each_version() {
    for version in [1, 2, 3] {
        let f = file(version, 3);
        let got = read(&f).unwrap();
        assert_eq!(
            got,
            Layout {
                tensors: 2,
                end: f.len() as u64
            },
            "version {version}"
        );
    }
}

#[test]
fn a_file_cut_anywhere_is_refused_and_says_where() {
    let f = file(3, 3);
    for cut in 8..f.len() {
        let why = read(&f[..cut]).unwrap_err();
        assert!(why.contains("cut short"), "cut at {cut}: {why}");
    }
    // Cut inside the data: the tensor whose bytes are missing is named.
    let why = read(&f[..f.len() - 1]).unwrap_err();
    assert!(
        why.starts_with("tensor `b` (Q4_1, 40 bytes) ends at byte"),
        "{why}"
    );
}

#[test]
fn corrupt_fields_are_refused_by_name() {
    // An element type no reader knows.
    let why = read(&file(3, 99)).unwrap_err();
    assert_eq!(
        why,
        "tensor `b` has element type 99, which no GGUF reader knows"
    );
    // The bytes each type needs: Q4_0's two 18-byte blocks fit the 40 written, Q8_0's
    // two 34-byte blocks do not.
    read(&file(3, 2)).unwrap();
    let why = read(&file(3, 8)).unwrap_err();
    assert!(
        why.starts_with("tensor `b` (Q8_0, 68 bytes) ends at byte"),
        "{why}"
    );
    // Q4_K blocks are 256 elements: 64 is not a whole block.
    let why = read(&file(3, 12)).unwrap_err();
    assert!(why.contains("not whole blocks of 256"), "{why}");
    // A metadata value type GGUF does not define (the array's type field, 9 -> 13).
    let mut f = file(3, 3);
    let at = 8 + 16 + 8 + "tokenizer.ggml.tokens".len();
    assert_eq!(f[at..at + 4], 9u32.to_le_bytes());
    f[at..at + 4].copy_from_slice(&13u32.to_le_bytes());
    let why = read(&f).unwrap_err();
    assert!(
        why.contains("`tokenizer.ggml.tokens` has value type 13"),
        "{why}"
    );
    // A tensor count no file of this size could hold.
    let mut f = file(3, 3);
    f[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(read(&f).unwrap_err().contains("more than"), "count");
    // An alignment that is not a power of two (64 -> 48).
    let mut f = file(3, 3);
    let key = b"general.alignment";
    let at = f.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
    f[at..at + 4].copy_from_slice(&48u32.to_le_bytes());
    assert!(read(&f).unwrap_err().contains("power of two"));
}

#[test]
fn only_a_gguf_header_passes() {
    // `GGUF`, then version 3 as a little-endian u32: SmolLM2's file starts so.
    assert_eq!(header_version(b"GGUF\x03\x00\x00\x00rest"), Ok(3));
    assert_eq!(header_version(b"GGUF\x01\x00\x00\x00"), Ok(1));
    let text = header_version(b"garbage\n").unwrap_err();
    assert_eq!(
        text,
        "it starts with the bytes 67 61 72 62, not `GGUF` (47 47 55 46)"
    );
    assert!(header_version(b"GGUF\x04\x00\x00\x00")
        .unwrap_err()
        .contains("version 4"));
    assert!(header_version(b"GGUF\x00\x00\x00\x00")
        .unwrap_err()
        .contains("version 0"));
    assert!(header_version(b"GGUF")
        .unwrap_err()
        .contains("4 bytes long"));
    assert!(header_version(b"").unwrap_err().contains("0 bytes long"));
}
