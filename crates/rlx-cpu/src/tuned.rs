//! The kernel choices `rlx tune` measured on this machine, kept on disk so that later runs start
//! with them: one small text file per machine in `$RLX_CACHE_DIR`, `$XDG_CACHE_HOME/rlx` or
//! `~/.cache/rlx`, named after and headed by the machine's key ([`crate::machine::key`]: CPUID
//! vendor, family, model and brand, the extensions the kernels use, rlx's version), so that a
//! cache folder shared between machines keeps each one's choices apart. A file that does not
//! parse, or that names another machine, is ignored; `RLX_TUNE=off` ignores the file.
//!
//! The format, `#` lines being comments:
//!
//! ```text
//! machine = GenuineIntel family 6 model 207 stepping 2 | Intel(R) Xeon(R) Processor | avx2 fma … | rlx 0.1.0
//! sgemm.tile = avx512 12×32
//! sgemm.kc = 384
//! sgemm.nc = 512
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the cache folder (before `$XDG_CACHE_HOME/rlx` and
/// `~/.cache/rlx`).
pub const DIR: &str = "RLX_CACHE_DIR";

/// The environment variable that, set to `off`, has the kernels ignore the cache file.
pub const SWITCH: &str = "RLX_TUNE";

/// The key of the line naming the machine a file was written on.
const MACHINE: &str = "machine";

/// A cache file's choices, `key = value` (e.g. `sgemm.kc = 384`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tuned {
    pub entries: BTreeMap<String, String>,
}

impl Tuned {
    /// The value of `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// The choices in `text` when it was written for `machine`: `None` when a line is neither
    /// blank, a `#` comment nor `key = value`, a key repeats, or the `machine` line is missing
    /// or names another machine.
    pub fn parse(text: &str, machine: &str) -> Option<Tuned> {
        let mut entries = BTreeMap::new();
        let mut written_for = None;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let (key, value) = line.split_once('=')?;
            let (key, value) = (key.trim(), value.trim().to_string());
            if key.is_empty() {
                return None;
            }
            if key == MACHINE {
                if written_for.replace(value).is_some() {
                    return None;
                }
            } else if entries.insert(key.to_string(), value).is_some() {
                return None;
            }
        }
        (written_for.as_deref() == Some(machine)).then_some(Tuned { entries })
    }

    /// The file's text for `machine`.
    pub fn to_text(&self, machine: &str) -> String {
        let mut text = format!("# rlx tune: kernel choices measured on this machine; delete the file to go back to the defaults.\n{MACHINE} = {machine}\n");
        for (key, value) in &self.entries {
            text += &format!("{key} = {value}\n");
        }
        text
    }

    /// The choices at `path` when they parse and were written for `machine`.
    pub fn read(path: &Path, machine: &str) -> Option<Tuned> {
        Tuned::parse(&std::fs::read_to_string(path).ok()?, machine)
    }

    /// Writes the file for `machine` at `path`, creating its folder: to a temporary file beside
    /// it, then renamed over it, so that a reader sees the old file or the new one, never part.
    pub fn write(&self, path: &Path, machine: &str) -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("tuned");
        let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&temp).and_then(|mut f| {
            f.write_all(self.to_text(machine).as_bytes())?;
            f.sync_all()
        });
        let renamed = written.and_then(|()| std::fs::rename(&temp, path));
        if renamed.is_err() {
            // The temporary file may not exist; the write's own error is the one to report.
            let _ = std::fs::remove_file(&temp);
        }
        renamed
    }
}

/// The cache folder, looking variables up through `var` (empty values count as unset):
/// `$RLX_CACHE_DIR`, else `$XDG_CACHE_HOME/rlx`, else `$HOME/.cache/rlx`.
pub fn dir_from(var: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let var = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var(DIR).or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("rlx"))).or_else(|| var("HOME").map(|d| d.join(".cache").join("rlx")))
}

/// The file in `dir` for `machine`: `tuned-` and a hash of the key (FNV-1a, stable across
/// builds and Rust versions, unlike std's hasher).
pub fn file_in(dir: &Path, machine: &str) -> PathBuf {
    let hash = machine.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    dir.join(format!("tuned-{hash:016x}.txt"))
}

/// This machine's cache file, where a cache folder is known.
pub fn path() -> Option<PathBuf> {
    dir_from(env).map(|d| file_in(&d, &crate::machine::key()))
}

/// What the kernels found for this machine's cache, once per process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// The choices read from this file.
    Read(PathBuf, Tuned),
    /// `RLX_TUNE=off`.
    Off,
    /// No cache folder: none of the variables [`dir_from`] reads is set.
    NoDir,
    /// No file there yet.
    Missing(PathBuf),
    /// A file there that does not parse or names another machine.
    Ignored(PathBuf),
}

impl State {
    /// The state for `switch` (the value of `RLX_TUNE`) and the file at `path` for `machine`.
    pub fn find(switch: Option<&str>, path: Option<PathBuf>, machine: &str) -> State {
        if switch.is_some_and(|s| s.trim().eq_ignore_ascii_case("off")) {
            return State::Off;
        }
        let Some(path) = path else { return State::NoDir };
        match Tuned::read(&path, machine) {
            Some(tuned) => State::Read(path, tuned),
            None if path.exists() => State::Ignored(path),
            None => State::Missing(path),
        }
    }

    /// The choices and the file they came from, when one was read.
    pub fn tuned(&self) -> Option<(&Path, &Tuned)> {
        match self {
            State::Read(path, tuned) => Some((path, tuned)),
            _ => None,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Read(path, _) => write!(f, "{}", path.display()),
            State::Off => write!(f, "none: {SWITCH}=off ignores the cache"),
            State::NoDir => write!(f, "none: no cache folder ({DIR}, XDG_CACHE_HOME and HOME are unset)"),
            State::Missing(path) => write!(f, "none: no file at {} (`rlx tune` writes it)", path.display()),
            State::Ignored(path) => write!(f, "none: {} does not parse or names another machine (ignored)", path.display()),
        }
    }
}

/// This process's cache state, read once.
pub fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| State::find(env(SWITCH).as_deref(), path(), &crate::machine::key()))
}

/// A variable of the process's environment (`None` when unset or not Unicode).
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the system's temporary folder, removed at drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("rlx-tuned-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn sample() -> Tuned {
        Tuned { entries: [("sgemm.tile", "avx512 8×48"), ("sgemm.kc", "256")].map(|(k, v)| (k.to_string(), v.to_string())).into() }
    }

    #[test]
    fn a_written_file_reads_back_for_its_machine_only() {
        let dir = TempDir::new("round-trip");
        let path = file_in(&dir.0.join("nested"), "cpu A");
        sample().write(&path, "cpu A").unwrap();
        assert_eq!(Tuned::read(&path, "cpu A"), Some(sample()));
        assert_eq!(Tuned::read(&path, "cpu B"), None);
        assert_eq!(State::find(None, Some(path.clone()), "cpu A"), State::Read(path.clone(), sample()));
        assert_eq!(State::find(None, Some(path.clone()), "cpu B"), State::Ignored(path.clone()));
        assert_eq!(State::find(Some("OFF"), Some(path.clone()), "cpu A"), State::Off);
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, [path.file_name().unwrap()], "the temporary file is renamed away");
        // Written again, the file is replaced whole.
        let mut other = sample();
        other.entries.remove("sgemm.kc");
        other.write(&path, "cpu A").unwrap();
        assert_eq!(Tuned::read(&path, "cpu A"), Some(other));
    }

    #[test]
    fn corrupt_files_are_ignored() {
        let machine = "cpu A";
        let good = sample().to_text(machine);
        assert_eq!(Tuned::parse(&good, machine), Some(sample()));
        for bad in [
            "",
            "\u{0}\u{1}binary",
            "sgemm.kc = 256\n",
            &good.replace("sgemm.kc = 256", "sgemm.kc 256"),
            &good.replace("sgemm.kc = 256", "= 256"),
            &format!("{good}sgemm.kc = 512\n"),
            &format!("{good}machine = cpu A\n"),
            &good[..good.find(MACHINE).unwrap()],
        ] {
            assert_eq!(Tuned::parse(bad, machine), None, "{bad:?}");
        }
        let dir = TempDir::new("corrupt");
        let path = file_in(&dir.0, machine);
        std::fs::create_dir_all(&dir.0).unwrap();
        std::fs::write(&path, [0xff, 0xfe, b'=', 0x80]).unwrap();
        assert_eq!(State::find(None, Some(path.clone()), machine), State::Ignored(path));
        let missing = dir.0.join("absent.txt");
        assert_eq!(State::find(None, Some(missing.clone()), machine), State::Missing(missing));
        assert_eq!(State::find(None, None, machine), State::NoDir);
    }

    #[test]
    fn the_folder_is_rlx_cache_dir_then_xdg_then_home() {
        fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
            move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        }
        assert_eq!(dir_from(vars(&[(DIR, "/a"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])), Some(PathBuf::from("/a")));
        assert_eq!(dir_from(vars(&[(DIR, ""), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])), Some(PathBuf::from("/x/rlx")));
        assert_eq!(dir_from(vars(&[("HOME", "/h")])), Some(PathBuf::from("/h/.cache/rlx")));
        assert_eq!(dir_from(vars(&[])), None);
        assert_ne!(file_in(Path::new("/a"), "cpu A"), file_in(Path::new("/a"), "cpu B"));
    }
}
