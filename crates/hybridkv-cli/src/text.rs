//! How keys and values are written on the command line, in the output and in dumps.
//!
//! Owns: the two text forms of bytes: *escaped* (the default: printable ASCII as is, a
//! backslash as `\\`, every other byte as `\xNN`; on input also `\n`, `\t`, `\r`, `\0`)
//! and *hex* (`--hex`: two lowercase hex digits per byte). Escaped output never holds a
//! tab or a newline, so a dump line `key<TAB>value` splits unambiguously, and what `scan`
//! prints can be given back to `get`. Never: touches a database.

use std::fmt::Write;

/// Which text form keys and values use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Escaped,
    Hex,
}

impl Form {
    /// `Form::Hex` when `hex` is set.
    pub fn new(hex: bool) -> Form {
        if hex {
            Form::Hex
        } else {
            Form::Escaped
        }
    }

    /// The text of `bytes` in this form.
    pub fn show(self, bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len());
        for &b in bytes {
            let _ = match self {
                Form::Hex => write!(out, "{b:02x}"),
                Form::Escaped => match b {
                    b'\\' => write!(out, "\\\\"),
                    0x20..=0x7e => write!(out, "{}", b as char),
                    _ => write!(out, "\\x{b:02x}"),
                },
            };
        }
        out
    }

    /// The bytes `text` stands for in this form; `what` names it in the error.
    pub fn parse(self, text: &str, what: &str) -> Result<Vec<u8>, String> {
        match self {
            Form::Hex => parse_hex(text, what),
            Form::Escaped => parse_escaped(text, what),
        }
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn parse_hex(text: &str, what: &str) -> Result<Vec<u8>, String> {
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return Err(format!(
            "{what} {text:?} is not hex: an odd number of digits"
        ));
    }
    t.chunks(2)
        .enumerate()
        .map(|(i, pair)| match pair {
            [h, l] => match (hex_digit(*h), hex_digit(*l)) {
                (Some(h), Some(l)) => Ok(h << 4 | l),
                _ => Err(format!(
                    "{what} {text:?} is not hex: bad digit at position {}",
                    2 * i
                )),
            },
            _ => Err(format!("{what} {text:?} is not hex")),
        })
        .collect()
}

fn parse_escaped(text: &str, what: &str) -> Result<Vec<u8>, String> {
    let t = text.as_bytes();
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while let Some(&b) = t.get(i) {
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let bad = || {
            format!(
                "{what} {text:?}: bad escape at position {i} (use \\\\, \\xNN, \\n, \\t, \\r or \\0)"
            )
        };
        match t.get(i + 1) {
            Some(b'\\') => out.push(b'\\'),
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(b'r') => out.push(b'\r'),
            Some(b'0') => out.push(0),
            Some(b'x') => {
                let (h, l) = match (t.get(i + 2), t.get(i + 3)) {
                    (Some(&h), Some(&l)) => (h, l),
                    _ => return Err(bad()),
                };
                match (hex_digit(h), hex_digit(l)) {
                    (Some(h), Some(l)) => out.push(h << 4 | l),
                    _ => return Err(bad()),
                }
                i += 2;
            }
            _ => return Err(bad()),
        }
        i += 2;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_string_round_trips_in_both_forms() {
        let all: Vec<u8> = (0..=255).collect();
        for bytes in [&all[..], b"", b"plain key", b"a\\b\tc\nd\x00"] {
            for form in [Form::Escaped, Form::Hex] {
                let text = form.show(bytes);
                assert_eq!(form.parse(&text, "key").unwrap(), bytes, "{form:?} {text}");
                assert!(!text.contains('\t') && !text.contains('\n'));
            }
        }
        assert_eq!(Form::Escaped.show(b"a\\b\x01"), "a\\\\b\\x01");
        assert_eq!(Form::Hex.show(b"\x00\xffA"), "00ff41");
        assert_eq!(Form::Escaped.parse("a\\tb\\n", "key").unwrap(), b"a\tb\n");
    }

    #[test]
    fn bad_text_says_what_and_where() {
        for (form, text, what) in [
            (Form::Hex, "abc", "odd number"),
            (Form::Hex, "zz", "bad digit at position 0"),
            (Form::Escaped, "ab\\q", "bad escape at position 2"),
            (Form::Escaped, "ab\\x4", "bad escape at position 2"),
            (Form::Escaped, "\\", "bad escape at position 0"),
        ] {
            let err = form.parse(text, "key").unwrap_err();
            assert!(err.contains(what) && err.contains("key"), "{text}: {err}");
        }
    }
}
