//! Short ids: the jobs whose ids start with a few characters, looked up as a range of the id index
//! (`id >= prefix AND id < the next prefix`), one owner's only when the caller sees only its own. Comparing
//! the start of each id (`substr(id, 1, n) = ?`) read the whole table: 350–390 ms at 200,000 jobs where a
//! whole id took 4 ms (docs/benchmarks.md).
use super::super::model::Job;

/// Ids are lower-case hex UUIDs with hyphens: the start of one, with the bounds of the index range it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPrefix {
    lower: String,
    upper: String,
}

impl IdPrefix {
    /// The start of an id (any case), or `None` for text that starts no id: empty, a whole id or longer, or
    /// a character no id has.
    pub fn parse(raw: &str) -> Option<IdPrefix> {
        let lower = raw.to_ascii_lowercase();
        let plausible = !lower.is_empty() && lower.len() < 36 && lower.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'-');
        if !plausible {
            return None;
        }
        // Every id starting with `lower` sorts before `lower` with its last character one higher, and any
        // id at or past that does not start with it. Hex digits and '-' are never the last character there
        // is ('-' → '.', '9' → ':', 'f' → 'g'), so one step never carries.
        let mut upper = lower.clone().into_bytes();
        *upper.last_mut().expect("not empty") += 1;
        let upper = String::from_utf8(upper).expect("ASCII");
        Some(IdPrefix { lower, upper })
    }

    /// The prefix itself: the least id the range holds.
    pub fn lower(&self) -> &str {
        &self.lower
    }

    /// The least text past every id that starts with the prefix.
    pub fn upper(&self) -> &str {
        &self.upper
    }
}

/// The jobs a short id names for one caller: the newest few, and how many there are in all.
#[derive(Debug, Default)]
pub struct PrefixMatches {
    /// Newest first, at most the limit asked for.
    pub jobs: Vec<Job>,
    /// Every job the prefix names for this caller, past the limit too.
    pub total: i64,
}

/// SQLite: `?1` lower bound, `?2` upper bound, `?3` the owner (NULL: every owner's), `?4` the limit. Binary
/// collation (SQLite's default) orders text as its bytes, so the range is exactly the ids with the prefix.
/// Parts of jobs run in parts are never named: `likelihood` tells the planner that this holds for nearly every
/// row, which it otherwise took for a narrow term and read the whole table in `seq` order for.
pub const SQLITE_JOBS: &str =
    "SELECT * FROM jobs WHERE id >= ?1 AND id < ?2 AND (?3 IS NULL OR owner = ?3) AND likelihood(parent_id IS NULL, 0.99) ORDER BY seq DESC LIMIT ?4";
pub const SQLITE_COUNT: &str = "SELECT count(*) FROM jobs WHERE id >= ?1 AND id < ?2 AND (?3 IS NULL OR owner = ?3) AND likelihood(parent_id IS NULL, 0.99)";

/// PostgreSQL: as `SQLITE_JOBS`. The comparison is in the "C" collation (bytes): a database's own one may
/// order by language rules that skip hyphens, where a range is not a prefix. Its index is `jobs_id_c`
/// (migrations/postgres/0008_id_prefix.sql). Ordered by `seq + 0`, not `seq`: a generic plan (which cannot
/// see how narrow the range is) otherwise walks the whole primary key backwards for the limit.
pub const POSTGRES_JOBS: &str = "SELECT * FROM jobs WHERE id COLLATE \"C\" >= $1::text AND id COLLATE \"C\" < $2::text \
     AND ($3::text IS NULL OR owner = $3::text) AND parent_id IS NULL ORDER BY seq + 0 DESC LIMIT $4::bigint";
pub const POSTGRES_COUNT: &str = "SELECT count(*) FROM jobs WHERE id COLLATE \"C\" >= $1::text AND id COLLATE \"C\" < $2::text \
     AND ($3::text IS NULL OR owner = $3::text) AND parent_id IS NULL";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_a_range_of_ids() {
        let cases = [("ABCD", "abcd", "abce"), ("abc9", "abc9", "abc:"), ("abcf", "abcf", "abcg"), ("abcdef01-", "abcdef01-", "abcdef01.")];
        for (raw, lower, upper) in cases {
            let prefix = IdPrefix::parse(raw).unwrap();
            assert_eq!((prefix.lower(), prefix.upper()), (lower, upper), "{raw}");
        }
        for raw in ["", "abcg", "ab cd", "abcd%", "ab_d", "é", "0123456789abcdef0123456789abcdef0123"] {
            assert_eq!(IdPrefix::parse(raw), None, "{raw:?}");
        }
        let prefix = IdPrefix::parse("abcdef01-").unwrap();
        for id in ["abcdef01-0000-4000-8000-000000000000", "abcdef01-ffff-4fff-bfff-ffffffffffff"] {
            assert!(prefix.lower() <= id && id < prefix.upper(), "{id}");
        }
        for id in ["abcdef00-ffff-4fff-bfff-ffffffffffff", "abcdef02-0000-4000-8000-000000000000"] {
            assert!(!(prefix.lower() <= id && id < prefix.upper()), "{id}");
        }
    }
}
