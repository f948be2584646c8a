//! The opaque key file (`--opaque-key-file` of `serve` and `decode`): read only when no one
//! but its owner can read or change it, and parsed by [`Keyring::parse`]. Nothing here prints
//! or logs a key; every error is one line naming the file.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use snowmint::opaque::Keyring;
use zeroize::Zeroizing;

/// Larger than any key file (32 keys of about 70 bytes, with comments): a larger file is the
/// wrong file, and is not read into memory.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// The keyring of the key file at `path`. Refused when the file is open to its group or to
/// others (read or write), too large, or not a key file.
pub fn read_key_file(path: &Path) -> Result<Keyring, String> {
    let shown = path.display();
    let fail = |what: String| format!("--opaque-key-file {shown}: {what}");
    // Opened once, and checked through the handle: the file read is the file checked.
    let mut file = std::fs::File::open(path).map_err(|e| fail(format!("cannot open it: {e}")))?;
    let metadata = file.metadata().map_err(|e| fail(format!("cannot read its metadata: {e}")))?;
    if !metadata.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o066 != 0 {
        return Err(fail(format!(
            "mode {mode:04o} lets its group or others read or write the keys; make it the owner's alone: chmod 600 {shown}"
        )));
    }
    if metadata.len() > MAX_KEY_FILE_BYTES {
        return Err(fail(format!("{} bytes, more than any key file ({MAX_KEY_FILE_BYTES})", metadata.len())));
    }
    let mut text = Zeroizing::new(String::new());
    file.read_to_string(&mut text).map_err(|e| fail(format!("cannot read it as text: {e}")))?;
    Keyring::parse(&text).map_err(|e| fail(e.to_string()))
}

/// The ID beneath `text`, an opaque ID's string form, revealed with the key file at `path`.
pub fn reveal(path: &Path, text: &str) -> Result<u64, String> {
    let (id, _version) = read_key_file(path)?.reveal_text(text).map_err(|e| e.to_string())?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use std::fs::Permissions;

    use super::*;

    const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn key_file(text: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("opaque.keys");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    #[test]
    fn a_file_of_the_owner_alone_is_read() {
        for mode in [0o600, 0o400, 0o700] {
            let (_dir, path) = key_file(&format!("# rotated yearly\n3 {KEY}\n"), mode);
            assert_eq!(read_key_file(&path).unwrap().versions(), [3], "mode {mode:o}");
        }
    }

    #[test]
    fn a_file_open_to_group_or_others_is_refused_with_the_fix() {
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o666] {
            let (_dir, path) = key_file(&format!("0 {KEY}\n"), mode);
            let error = read_key_file(&path).unwrap_err();
            assert!(error.contains(&format!("mode {mode:04o}")), "{error}");
            assert!(error.contains(&format!("chmod 600 {}", path.display())), "{error}");
            assert!(!error.contains(KEY), "{error}");
        }
    }

    #[test]
    fn a_malformed_file_is_refused_by_line_without_its_key() {
        let (_dir, path) = key_file(&format!("0 {KEY}\n0 {}\n", KEY.replace('0', "1")), 0o600);
        let error = read_key_file(&path).unwrap_err();
        assert!(error.starts_with(&format!("--opaque-key-file {}: line 2:", path.display())), "{error}");
        assert!(!error.contains("1122") && error.lines().count() == 1, "{error}");
    }

    #[test]
    fn a_missing_file_or_a_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = read_key_file(&dir.path().join("none")).unwrap_err();
        assert!(error.contains("cannot open it"), "{error}");
        let error = read_key_file(dir.path()).unwrap_err();
        assert!(error.contains("not a regular file") || error.contains("cannot"), "{error}");
    }
}
