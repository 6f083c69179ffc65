//! Database names that differ only in case (mongod's DatabaseDifferCase, 13297).
//!
//! mongod refuses to create a database whose name equals an existing one's but for ASCII
//! case ("Shop" while "shop" exists), because case-insensitive file systems would mix them.
//! Myriad keeps no files per database, but drivers and tools expect the refusal, so a
//! creation that adds a database entry checks for such a name first.
//!
//! Invariants:
//! - The check runs under the DDL mutex, in the same critical section that writes the new
//!   database entry (a creation group, a rename into a new database), so of concurrent
//!   creators of two such names exactly one wins.
//! - It costs seeks, never a scan of every database: the names that match case-insensitively
//!   are walked byte by byte in the catalog's `D` keys, trying both cases of each letter and
//!   pruning a branch as soon as no key starts with it. Only creations of a new database pay it.

use rocksdb::ReadOptions;

use crate::engine::Engine;
use crate::families::FAMILY_CATALOG;
use crate::{keys, StorageError};

impl Engine {
    /// Refuses creating database `db` when another database's name differs from it only in
    /// ASCII case. The caller holds the DDL mutex.
    pub(crate) fn check_database_case(&self, db: &str) -> Result<(), StorageError> {
        match self.database_differing_in_case(db)? {
            Some(existing) => Err(StorageError::DatabaseDifferCase { existing, requested: db.to_string() }),
            None => Ok(()),
        }
    }

    /// The existing database whose name equals `db` but for ASCII case, if any.
    fn database_differing_in_case(&self, db: &str) -> Result<Option<String>, StorageError> {
        let catalog = self.family(FAMILY_CATALOG)?;
        let (_, end) = keys::databases_range();
        let mut read_options = ReadOptions::default();
        read_options.set_iterate_upper_bound(end);
        let mut iterator = self.db.raw_iterator_cf_opt(catalog, read_options);
        let wanted = keys::database_key(db);
        // Prefixes of database keys that exist, each matching `wanted` case-insensitively.
        let mut pending: Vec<Vec<u8>> = vec![wanted[..1].to_vec()];
        while let Some(prefix) = pending.pop() {
            let Some(&byte) = wanted.get(prefix.len()) else {
                iterator.seek(&prefix);
                if iterator.key() == Some(prefix.as_slice()) && prefix != wanted {
                    return Ok(Some(keys::database_name_from_key(&prefix)?.to_string()));
                }
                continue;
            };
            let lower = byte.to_ascii_lowercase();
            let upper = byte.to_ascii_uppercase();
            let cases: &[u8] = if lower == upper { &[byte] } else { &[lower, upper] };
            for &candidate in cases {
                let mut longer = prefix.clone();
                longer.push(candidate);
                iterator.seek(&longer);
                if iterator.key().is_some_and(|key| key.starts_with(&longer)) {
                    pending.push(longer);
                }
            }
        }
        iterator.status()?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Engine, EngineOptions, StorageError};

    #[test]
    fn only_a_name_differing_in_case_alone_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        let engine = Engine::open(directory.path(), &EngineOptions::default()).unwrap();
        for db in ["shop", "shops", "Shop_2", "sho", "a-b"] {
            engine.create_collection(db, "things", bson::Document::new()).unwrap();
        }
        // Names sharing a prefix or a length, but not every letter, are other databases.
        for db in ["shoq", "shopping", "Shop_3", "SHO2", "A-C", "s"] {
            engine.create_collection(db, "things", bson::Document::new()).unwrap_or_else(|error| panic!("{db}: {error}"));
        }
        for (db, existing) in [("SHOP", "shop"), ("sHoPs", "shops"), ("shop_2", "Shop_2"), ("A-B", "a-b"), ("Sho", "sho")] {
            let refused = engine.create_collection(db, "other", bson::Document::new()).map(|_| ());
            assert_eq!(refused, Err(StorageError::DatabaseDifferCase { existing: existing.to_string(), requested: db.to_string() }));
        }
        // The database itself, by its own spelling, takes more collections.
        engine.create_collection("shop", "more", bson::Document::new()).unwrap();
        // Renaming into a new database checks the same.
        let renamed = engine.rename_collection("shop", "more", "SHOPS", "more", false).map(|_| ());
        assert_eq!(renamed, Err(StorageError::DatabaseDifferCase { existing: "shops".to_string(), requested: "SHOPS".to_string() }));
    }
}
