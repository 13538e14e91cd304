//! Which register tile and cache blocking the f32 GEMM runs, and where each came from: an
//! environment variable, the file `rlx tune` wrote for this machine ([`crate::tuned`]), or the
//! default for the CPU found (the fastest tile it runs by CPUID, [`Blocking::DEFAULT`]). Made
//! once per process; nothing is measured inside a library call, so runs stay deterministic.

use super::sgemm::Blocking;
use super::tile::Tile;
use crate::tuned::{self, Tuned};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that picks the register tile ([`Tile::named`]); it wins over the
/// cache file.
pub const TILE_VAR: &str = "RLX_SGEMM_TILE";
/// The environment variable that sets the blocking's `kc` (a whole number in
/// [`Blocking::KC_RANGE`]); it wins over the cache file.
pub const KC_VAR: &str = "RLX_SGEMM_KC";
/// The environment variable that sets the blocking's `nc` (a whole number in
/// [`Blocking::NC_RANGE`]); it wins over the cache file.
pub const NC_VAR: &str = "RLX_SGEMM_NC";

/// The cache file's key for the tile's name.
pub const TILE_KEY: &str = "sgemm.tile";
/// The cache file's key for `kc`.
pub const KC_KEY: &str = "sgemm.kc";
/// The cache file's key for `nc`.
pub const NC_KEY: &str = "sgemm.nc";

/// How an f32 GEMM runs: its register tile and the cache blocking around it.
#[derive(Clone, Copy)]
pub struct Choice {
    pub tile: Tile,
    pub blocking: Blocking,
}

impl Choice {
    /// The choice without tuning on this CPU: its fastest tile by CPUID, the default blocking.
    pub fn default_here() -> Choice {
        Choice { tile: Tile::available()[0], blocking: Blocking::DEFAULT }
    }

    /// The choice f32 GEMMs run in this process ([`Choices::get`]).
    pub fn get() -> Choice {
        Choices::get().choice()
    }

    /// This choice as a cache file's entries.
    pub fn tuned(&self) -> Tuned {
        let entries = [(TILE_KEY, self.tile.name.to_string()), (KC_KEY, self.blocking.kc.to_string()), (NC_KEY, self.blocking.nc.to_string())];
        Tuned { entries: entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
    }

    /// Whether two choices run the same kernel with the same blocking.
    pub fn same(&self, other: &Choice) -> bool {
        self.tile.name == other.tile.name && self.blocking == other.blocking
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, KC {}, NC {}", self.tile.name, self.blocking.kc, self.blocking.nc)
    }
}

/// Where a choice came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The CPU's default.
    Default,
    /// The cache file at this path.
    Cache(PathBuf),
    /// This environment variable, set to `value`.
    Env { var: &'static str, value: String },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Cache(path) => write!(f, "cache {}", path.display()),
            Origin::Env { var, value } => write!(f, "{var}={value}"),
        }
    }
}

/// One choice, where it came from, and why an environment variable set for it was passed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen<T> {
    pub value: T,
    pub origin: Origin,
    /// E.g. `RLX_SGEMM_KC="0" is not a whole number in 16..=1024`.
    pub refused: Option<String>,
}

impl<T> Chosen<T> {
    /// `value (origin)`, and the refusal after the origin; `show` writes the value.
    fn describe(&self, show: impl fmt::Display) -> String {
        match &self.refused {
            Some(why) => format!("{show} ({}; {why})", self.origin),
            None => format!("{show} ({})", self.origin),
        }
    }

    /// `value (origin)` for a value that displays itself.
    pub fn describe_value(&self) -> String
    where
        T: fmt::Display,
    {
        self.describe(&self.value)
    }
}

/// The f32 GEMM's choices, each with its origin.
pub struct Choices {
    pub tile: Chosen<Tile>,
    pub kc: Chosen<usize>,
    pub nc: Chosen<usize>,
}

impl Choices {
    /// The choices for the variables `var` looks up (empty values count as unset) and the cache
    /// file read, if any: each from its variable where that is valid here, else from the file
    /// where it holds a valid value, else the default ([`Choice::default_here`]).
    pub fn resolve(var: impl Fn(&str) -> Option<String>, cache: Option<(&Path, &Tuned)>) -> Choices {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let default = Choice::default_here();
        let whole = |range: std::ops::RangeInclusive<usize>| move |s: &str| s.trim().parse::<usize>().ok().filter(|v| range.contains(v));
        let (kc, nc) = (Blocking::KC_RANGE, Blocking::NC_RANGE);
        Choices {
            tile: pick(TILE_VAR, &var, TILE_KEY, cache, Tile::named, default.tile, "names no tile this CPU runs".into()),
            kc: pick(KC_VAR, &var, KC_KEY, cache, whole(kc.clone()), default.blocking.kc, format!("is not a whole number in {}..={}", kc.start(), kc.end())),
            nc: pick(NC_VAR, &var, NC_KEY, cache, whole(nc.clone()), default.blocking.nc, format!("is not a whole number in {}..={}", nc.start(), nc.end())),
        }
    }

    /// This process's choices: its environment and this machine's cache file
    /// ([`tuned::state`]), resolved once.
    pub fn get() -> &'static Choices {
        static CHOICES: OnceLock<Choices> = OnceLock::new();
        CHOICES.get_or_init(|| Choices::resolve(|name| std::env::var(name).ok(), tuned::state().tuned()))
    }

    /// The tile and blocking chosen.
    pub fn choice(&self) -> Choice {
        Choice { tile: self.tile.value, blocking: Blocking { kc: self.kc.value, nc: self.nc.value } }
    }

    /// The tile as `rlx info` prints it: `avx512 12×32 (default)`.
    pub fn tile_text(&self) -> String {
        self.tile.describe(self.tile.value.name)
    }

    /// The blocking as `rlx info` prints it: `KC 384 (default), NC 512 (default)`.
    pub fn blocking_text(&self) -> String {
        format!("KC {}, NC {}", self.kc.describe_value(), self.nc.describe_value())
    }
}

/// A choice from the variable `name` when `parse` takes its value, else from the cache file's
/// `key` when `parse` takes that, else `default`; `refusal` says what is wrong with a variable's
/// value that `parse` refused.
fn pick<T>(
    name: &'static str,
    var: &impl Fn(&str) -> Option<String>,
    key: &str,
    cache: Option<(&Path, &Tuned)>,
    parse: impl Fn(&str) -> Option<T>,
    default: T,
    refusal: String,
) -> Chosen<T> {
    let mut refused = None;
    if let Some(value) = var(name) {
        match parse(&value) {
            Some(v) => return Chosen { value: v, origin: Origin::Env { var: name, value }, refused: None },
            None => refused = Some(format!("{name}={value:?} {refusal}")),
        }
    }
    match cache.and_then(|(path, tuned)| Some((parse(tuned.get(key)?)?, path))) {
        Some((value, path)) => Chosen { value, origin: Origin::Cache(path.to_path_buf()), refused },
        None => Chosen { value: default, origin: Origin::Default, refused },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_environment_wins_over_the_cache_which_wins_over_the_default() {
        let tiles = Tile::available();
        let (first, last) = (tiles[0], tiles[tiles.len() - 1]);
        let path = Path::new("/cache/tuned.txt");
        let cached = Tuned { entries: [(TILE_KEY, last.name), (KC_KEY, "256"), (NC_KEY, "1024")].map(|(k, v)| (k.to_string(), v.to_string())).into() };

        let none = Choices::resolve(env(&[]), None);
        assert_eq!((none.tile.value.name, none.kc.value, none.nc.value), (first.name, 384, 512));
        assert_eq!(none.tile_text(), format!("{} (default)", first.name));
        assert_eq!(none.blocking_text(), "KC 384 (default), NC 512 (default)");

        let from_cache = Choices::resolve(env(&[]), Some((path, &cached)));
        assert_eq!((from_cache.tile.value.name, from_cache.kc.value, from_cache.nc.value), (last.name, 256, 1024));
        assert_eq!(from_cache.kc.origin, Origin::Cache(path.to_path_buf()));
        assert_eq!(from_cache.blocking_text(), "KC 256 (cache /cache/tuned.txt), NC 1024 (cache /cache/tuned.txt)");

        let overridden = Choices::resolve(env(&[(TILE_VAR, first.isa), (KC_VAR, " 512 "), (NC_VAR, "")]), Some((path, &cached)));
        assert_eq!(overridden.tile.value.name, first.name);
        assert_eq!(overridden.tile.origin, Origin::Env { var: TILE_VAR, value: first.isa.to_string() });
        assert_eq!((overridden.kc.value, overridden.nc.value), (512, 1024), "an empty variable counts as unset");
        assert_eq!(overridden.choice().blocking, Blocking { kc: 512, nc: 1024 });
    }

    #[test]
    fn a_refused_variable_falls_back_and_says_why() {
        let refused = Choices::resolve(env(&[(TILE_VAR, "sve 8x8"), (KC_VAR, "0"), (NC_VAR, "lots")]), None);
        assert_eq!(refused.tile.value.name, Tile::available()[0].name);
        assert_eq!(refused.tile_text(), format!("{} (default; RLX_SGEMM_TILE=\"sve 8x8\" names no tile this CPU runs)", Tile::available()[0].name));
        assert_eq!(refused.kc.describe_value(), "384 (default; RLX_SGEMM_KC=\"0\" is not a whole number in 16..=1024)");
        assert_eq!(refused.nc.value, 512);
    }

    #[test]
    fn cached_values_this_cpu_cannot_use_are_passed_over() {
        let path = Path::new("/cache/tuned.txt");
        let cached = Tuned { entries: [(TILE_KEY, "sve 8×8"), (KC_KEY, "100000"), (NC_KEY, "768")].map(|(k, v)| (k.to_string(), v.to_string())).into() };
        let choices = Choices::resolve(env(&[]), Some((path, &cached)));
        assert_eq!((choices.tile.origin.clone(), choices.kc.origin.clone()), (Origin::Default, Origin::Default));
        assert_eq!((choices.nc.value, choices.nc.origin.clone()), (768, Origin::Cache(path.to_path_buf())));
    }

    #[test]
    fn a_choice_round_trips_through_its_cache_entries() {
        for tile in Tile::available() {
            let choice = Choice { tile, blocking: Blocking { kc: 256, nc: 1024 } };
            let back = Choices::resolve(env(&[]), Some((Path::new("/c"), &choice.tuned()))).choice();
            assert!(back.same(&choice), "{choice} came back as {back}");
        }
    }
}
