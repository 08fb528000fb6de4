//! POSIX shell quoting that round-trips any byte string, and the env file written with it.
//!
//! A value is written as `'…'` with every `'` as `'\''`: inside single quotes a POSIX
//! shell takes every byte literally, so quotes, newlines, `$(…)`, backticks and bytes that
//! are not UTF-8 all arrive unchanged. Only NUL cannot, and no environment holds NUL.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// `value` quoted for a POSIX shell.
pub fn quote(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for &b in value {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvFileError {
    #[error("line {line}: expected `export NAME='value'`")]
    Syntax { line: usize },
    #[error("variable {name:?} is not a shell identifier")]
    Name { name: String },
    #[error("the value of {name} holds a NUL byte")]
    Nul { name: String },
}

/// An env file: `export NAME='value'` lines, sourceable by any POSIX shell and read back
/// exactly by [`parse`].
pub fn render<'a>(
    vars: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
) -> Result<Vec<u8>, EnvFileError> {
    let mut out = Vec::new();
    for (name, value) in vars {
        let name_text = name.to_string_lossy();
        if !pai_contract::env::is_shell_identifier(&name_text) || name_text.len() != name.len() {
            return Err(EnvFileError::Name {
                name: name_text.into_owned(),
            });
        }
        if value.as_bytes().contains(&0) {
            return Err(EnvFileError::Nul {
                name: name_text.into_owned(),
            });
        }
        out.extend_from_slice(b"export ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(&quote(value.as_bytes()));
        out.push(b'\n');
    }
    Ok(out)
}

/// Reads a file written by [`render`].
pub fn parse(text: &[u8]) -> Result<Vec<(OsString, OsString)>, EnvFileError> {
    let mut vars = Vec::new();
    let mut rest = text;
    let mut line = 1;
    while !rest.is_empty() {
        let syntax = EnvFileError::Syntax { line };
        let after_export = rest.strip_prefix(b"export ").ok_or(syntax)?;
        let eq = after_export
            .iter()
            .position(|&b| b == b'=')
            .ok_or(EnvFileError::Syntax { line })?;
        let name = &after_export[..eq];
        if !std::str::from_utf8(name).is_ok_and(pai_contract::env::is_shell_identifier) {
            return Err(EnvFileError::Name {
                name: String::from_utf8_lossy(name).into_owned(),
            });
        }
        let mut cursor = &after_export[eq + 1..];
        let mut value = Vec::new();
        // A sequence of '…' pieces joined by \' (an escaped quote).
        loop {
            cursor = cursor
                .strip_prefix(b"'")
                .ok_or(EnvFileError::Syntax { line })?;
            let end = cursor
                .iter()
                .position(|&b| b == b'\'')
                .ok_or(EnvFileError::Syntax { line })?;
            value.extend_from_slice(&cursor[..end]);
            line += cursor[..end].iter().filter(|&&b| b == b'\n').count();
            cursor = &cursor[end + 1..];
            match cursor.strip_prefix(b"\\'") {
                Some(after) => {
                    value.push(b'\'');
                    cursor = after;
                }
                None => break,
            }
        }
        rest = cursor
            .strip_prefix(b"\n")
            .ok_or(EnvFileError::Syntax { line })?;
        line += 1;
        vars.push((OsString::from_vec(name.to_vec()), OsString::from_vec(value)));
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quoting_examples() {
        assert_eq!(quote(b"it's"), b"'it'\\''s'".to_vec());
        assert_eq!(quote(b""), b"''".to_vec());
    }

    proptest! {
        #[test]
        fn files_round_trip(vars in proptest::collection::vec(("[A-Za-z_][A-Za-z0-9_]{0,10}", proptest::collection::vec(1u8.., 0..40)), 0..8)) {
            let owned: Vec<(OsString, OsString)> = vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from_vec(v.clone())))
                .collect();
            let text = render(owned.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str()))).expect("renders");
            prop_assert_eq!(parse(&text).expect("parses"), owned);
        }
    }

    #[test]
    fn bad_files_are_errors() {
        assert_eq!(parse(b"FOO=bar\n"), Err(EnvFileError::Syntax { line: 1 }));
        assert_eq!(
            parse(b"export A='x'\nexport B='unterminated\n"),
            Err(EnvFileError::Syntax { line: 2 })
        );
        assert!(render([(OsStr::new("A-B"), OsStr::new("x"))]).is_err());
    }
}
