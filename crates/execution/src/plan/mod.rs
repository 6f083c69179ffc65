//! Query planning: choose an `_id` lookup, a collection scan or one index scan for a query.
//! Execution ([`crate::execution`]) always rechecks the full filter, so index bounds only need
//! to be a superset of the matching keys.
//!
//! Modules: [`candidates`] (bounds and sort order per index), [`trial`] (trial runs among
//! several candidates), [`cache`] (the winner per query shape).

pub mod cache;
pub mod candidates;
pub mod min_max;
pub mod partial;
pub mod trial;

use std::collections::HashSet;
use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;
use myriad_query::filter::Filter;
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;
use myriad_storage::{CollectionHandle, IndexKeyRange, IndexView, RecordId};

use crate::backend::Backend;
use myriad_reply::error::{CommandError, CommandResult, BAD_VALUE};
use trial::TrialRunner;

/// What the client asked for, parsed.
#[derive(Clone)]
pub struct QuerySpec {
    pub filter: Arc<Filter>,
    pub filter_document: Document,
    pub projection: Option<Projection>,
    pub sort: Option<SortSpec>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub hint: Option<Bson>,
    /// The command's `allowDiskUse` (None: `allowDiskUseByDefault`).
    pub allow_disk_use: Option<bool>,
    /// find's `min` and `max`: index key bounds of the hinted index.
    pub min_max: Option<MinMax>,
    /// The query's collation: None until [`QuerySpec::with_collation`] resolves it (as
    /// given, or the collection's default); Some(None) is the simple collation.
    pub collation: Option<Option<Arc<Collator>>>,
}

/// find's `min` (inclusive) and `max` (exclusive) key bounds, each empty when not given.
#[derive(Clone, Debug, PartialEq)]
pub struct MinMax {
    pub min: Document,
    pub max: Document,
}

impl MinMax {
    /// None when neither is given (or both are empty).
    pub fn parse(min: Option<&Document>, max: Option<&Document>) -> Option<MinMax> {
        let (min, max) = (min.cloned().unwrap_or_default(), max.cloned().unwrap_or_default());
        (!min.is_empty() || !max.is_empty()).then_some(MinMax { min, max })
    }
}

impl QuerySpec {
    /// A query of `filter_document` alone: no projection, sort, skip, limit or hint.
    pub fn for_filter(filter_document: Document) -> CommandResult<QuerySpec> {
        Ok(QuerySpec {
            filter: Arc::new(Filter::parse(&filter_document)?),
            filter_document,
            projection: None,
            sort: None,
            skip: 0,
            limit: None,
            hint: None,
            allow_disk_use: None,
            min_max: None,
            collation: None,
        })
    }

    /// The query with its collation decided: `given` (from the command) or else the
    /// collection's default. Its filter and sort then compare strings by it.
    pub fn with_collation(mut self, collection: &CollectionHandle) -> QuerySpec {
        let collator = crate::collation::effective(self.collation.take(), Some(collection));
        if collator.is_some() || self.filter.collator().is_some() {
            self.filter = Arc::new((*self.filter).clone().with_collator(collator.clone()));
        }
        self.sort = self.sort.take().map(|sort| sort.with_collator(collator.clone()));
        self.collation = Some(collator);
        self
    }

    /// The collation the query compares strings by (None: simple).
    pub fn collator(&self) -> Option<&Arc<Collator>> {
        self.collation.as_ref().and_then(Option::as_ref)
    }
}

/// How the documents are found.
#[derive(Clone, Debug)]
pub enum Access {
    /// `_id` equality: one point read of the `_id` index and one of the record.
    IdLookup { id: Bson },
    CollectionScan { last_record_id: Option<RecordId> },
    IndexScan(IndexScan),
    /// A top-level `$or` whose every branch has an index: the union of their scans, each
    /// record once.
    Or(OrScan),
}

/// The scans of an `$or`'s branches, read one after the other.
#[derive(Clone, Debug)]
pub struct OrScan {
    pub branches: Vec<IndexScan>,
    pub current_branch: usize,
    /// Records already returned by any branch.
    pub seen_record_ids: HashSet<RecordId>,
}

/// A resumable scan of one index over key ranges.
#[derive(Clone, Debug)]
pub struct IndexScan {
    pub index_name: String,
    /// The key pattern and bounds, as explain shows them.
    pub key_pattern: Document,
    pub bounds: Document,
    pub unique: bool,
    pub sparse: bool,
    pub partial: bool,
    /// Whether some key path of the index holds an array (explain's `isMultiKey`); None:
    /// unknown, shown as multikey.
    pub multikey: Option<bool>,
    /// explain's `multiKeyPaths`, when the index tracks them.
    pub multikey_paths: Option<Document>,
    /// Per key field, whether a covered scan reads its value from the entry (a field that is
    /// not multikey); the others are left out of covered documents.
    pub coverable_fields: Vec<bool>,
    /// Scans from the highest key down (a sort opposite to the index's directions).
    pub reverse: bool,
    /// The scan's order is the query's sort: no blocking sort runs.
    pub provides_sort: bool,
    /// In scan order.
    pub ranges: Vec<IndexKeyRange>,
    pub current_range: usize,
    pub last_entry_key: Option<Vec<u8>>,
    /// Multikey entries and overlapping intervals can name one record twice.
    pub seen_record_ids: HashSet<RecordId>,
    /// Entries read so far (explain's per-scan keysExamined).
    pub keys_examined: u64,
    /// The key fields' dotted paths, in key order.
    pub field_paths: Vec<String>,
    /// Filter, projection and sort read only key fields: documents are rebuilt from the
    /// entries' exact key values instead of fetched (PROJECTION_COVERED, no FETCH).
    pub covered: bool,
    /// The index's normalised collation (explain shows it on the IXSCAN); None: simple.
    pub collation: Option<Document>,
}

impl IndexScan {
    pub fn new(index: &IndexView<'_>, ranges: Vec<IndexKeyRange>, reverse: bool, provides_sort: bool, bounds: Document) -> IndexScan {
        IndexScan {
            index_name: index.name().to_string(),
            key_pattern: Document::try_from(index.key_pattern()).unwrap_or_default(),
            bounds,
            unique: index.unique(),
            sparse: index.sparse(),
            partial: index.is_partial(),
            multikey: None,
            multikey_paths: None,
            coverable_fields: Vec::new(),
            reverse,
            provides_sort,
            ranges,
            current_range: 0,
            last_entry_key: None,
            seen_record_ids: HashSet::new(),
            keys_examined: 0,
            field_paths: index.fields().map(|(path, _)| path.to_string()).collect(),
            covered: false,
            collation: index.collator().map(|collator| collator.to_document()),
        }
    }

    /// Records what `multikey` says of the index (explain's fields, the coverable fields).
    pub fn set_multikey(&mut self, index: &IndexView<'_>, multikey: &candidates::IndexMultikey) {
        let fields: Vec<(&str, myriad_storage::IndexFieldKind)> = index.fields().collect();
        self.multikey = Some(multikey.is_multikey());
        self.multikey_paths = multikey.explain_paths(&fields);
        self.coverable_fields = multikey.coverable_fields();
    }

    /// Marks the scan covered when `spec` reads nothing but this index's (non-hashed) key
    /// fields that are not multikey: an inclusion projection of them, a filter on them, a sort
    /// on them.
    fn cover(&mut self, spec: &QuerySpec, hashed: bool) {
        let coverable = |path: &String| {
            let position = self.field_paths.iter().position(|field| field == path);
            position.is_some_and(|position| self.coverable_fields.get(position) == Some(&true))
        };
        let Some(projected) = spec.projection.as_ref().and_then(Projection::included_paths) else { return };
        let Some(filtered) = spec.filter.referenced_paths() else { return };
        let sorted: Vec<String> = spec.sort.as_ref().map(|sort| sort.pattern().keys().cloned().collect()).unwrap_or_default();
        self.covered = !hashed && projected.iter().chain(&filtered).chain(&sorted).all(coverable);
    }

    /// True when one record may have several entries in the scan's ranges: some path of the
    /// index is multikey, or its paths are not tracked (the ranges themselves are disjoint).
    pub fn may_repeat_records(&self) -> bool {
        self.multikey_paths.is_none() || self.multikey != Some(false)
    }

    /// planSummary's form: `IXSCAN { a: 1, b: -1 }`.
    pub fn describe(&self) -> String {
        let fields: Vec<String> = self.key_pattern.iter().map(|(field, direction)| format!("{field}: {direction}")).collect();
        format!("IXSCAN {{ {} }}", fields.join(", "))
    }
}

impl Access {
    pub fn describe(&self) -> String {
        match self {
            Access::IdLookup { .. } => "IDHACK".to_string(),
            Access::CollectionScan { .. } => "COLLSCAN".to_string(),
            Access::IndexScan(scan) => scan.describe(),
            Access::Or(union) => union.branches.iter().map(IndexScan::describe).collect::<Vec<_>>().join(", "),
        }
    }

    /// True when the access path yields documents in the query's sort order.
    pub fn provides_sort(&self) -> bool {
        matches!(self, Access::IndexScan(scan) if scan.provides_sort)
    }

 }

/// The planner's choice for one query, and the plans it rejected with what their trial runs
/// did (explain's `rejectedPlans` and `allPlansExecution`).
pub struct PlannedQuery {
    pub access: Access,
    pub rejected: Vec<trial::TrialOutcome>,
    /// The winner's trial, when plans were compared.
    pub winner_trial: Option<trial::TrialOutcome>,
    pub from_plan_cache: bool,
}

/// Picks the access path: `_id` equality by point lookup; a hinted index; else every index
/// that bounds the filter's fields (equalities, then one range) or gives the sort. One
/// candidate is used as it is; several are trial-run and the most productive wins, cached per
/// query shape until the collection's indexes change. No candidate: a collection scan.
/// Several candidates are trial-run by `run_trial`.
pub fn plan_query(backend: &dyn Backend, collection: &CollectionHandle, spec: &QuerySpec, run_trial: &TrialRunner<'_>) -> CommandResult<PlannedQuery> {
    let filter = &spec.filter_document;
    let hint = spec.hint.as_ref();
    let single = |access| Ok(PlannedQuery { access, rejected: Vec::new(), winner_trial: None, from_plan_cache: false });
    let id_hinted = match hint {
        None => true,
        Some(Bson::String(name)) => name == myriad_storage::ID_INDEX_NAME,
        Some(Bson::Document(pattern)) => pattern.len() == 1 && pattern.contains_key("_id"),
        Some(_) => false,
    };
    if let Some(bounds) = &spec.min_max {
        let index = min_max::hinted_index(collection, hint);
        let natural = matches!(hint, Some(Bson::Document(pattern)) if pattern.contains_key("$natural"));
        if index.is_none() && hint.is_some() && !natural {
            return Err(CommandError::new(BAD_VALUE, "hint provided does not correspond to an existing index"));
        }
        let multikey = index.as_ref().map(|index| MultikeyIndexes::new(backend, collection, false).of(index));
        let mut scan = min_max::min_max_scan(index, bounds)?;
        if let (Some(index), Some(multikey)) = (min_max::hinted_index(collection, hint), multikey) {
            scan.set_multikey(&index, &multikey);
            scan.cover(spec, uncoverable(&index));
        }
        return single(Access::IndexScan(scan));
    }
    if let (true, Some(id)) = (id_hinted, id_equality(filter)) {
        // The `_id` index keys comparison values under its collation (the collection's
        // default): a point read answers only a query of that collation, or a value that
        // holds no strings.
        let id_collator = collection.index_views().find(|index| index.name() == myriad_storage::ID_INDEX_NAME).and_then(|index| index.collator());
        if !candidates::collation_sensitive(id) || myriad_collation::same_collation(id_collator.map(|collator| &**collator), spec.collator().map(|collator| &**collator)) {
            return single(Access::IdLookup { id: id.clone() });
        }
    }
    let multikey = MultikeyIndexes::new(backend, collection, spec.sort.is_some());
    if let Some(hint) = hint {
        let index = match hint {
            Bson::String(name) => collection.index_views().find(|index| index.name() == name),
            Bson::Document(pattern) if pattern.contains_key("$natural") => {
                return single(Access::CollectionScan { last_record_id: None });
            }
            Bson::Document(pattern) => collection.index_views().find(|index| same_key_pattern(index, pattern)),
            _ => None,
        };
        // A partial index the query does not imply would miss matches: not hintable.
        let Some(index) = index.filter(|index| index.sparse() || usable(index, filter, spec.collator())) else {
            return Err(CommandError::new(BAD_VALUE, "hint provided does not correspond to an existing index"));
        };
        let index_multikey = multikey.of(&index);
        let mut scan = candidates::hinted_scan(&index, &spec.filter, spec.sort.as_ref(), &index_multikey);
        scan.set_multikey(&index, &index_multikey);
        scan.cover(spec, uncoverable(&index));
        return single(Access::IndexScan(scan));
    }
    let candidates = index_candidates(collection, spec, &multikey);
    match candidates.len() {
        0 if crate::knobs::no_table_scan() => Err(CommandError::new(
            myriad_reply::error::NO_QUERY_EXECUTION_PLANS,
            format!("No indexed plan found for the query (notablescan is set): {filter}"),
        )),
        0 => single(Access::CollectionScan { last_record_id: None }),
        1 => single(candidates.into_iter().next().expect("one candidate")),
        _ => choose_among(backend, collection, spec, candidates, run_trial),
    }
}

/// The plans the planner weighs for `spec` (its collation resolved) when no hint and no `_id`
/// equality decides: an index scan per index that bounds the filter or gives the sort, and the
/// union plan of a top-level `$or`. Every one must return what a collection scan returns (the
/// differential test, `tests/planner_differential.rs`, forces each).
pub fn candidate_plans(backend: &dyn Backend, collection: &CollectionHandle, spec: &QuerySpec) -> Vec<Access> {
    index_candidates(collection, spec, &MultikeyIndexes::new(backend, collection, spec.sort.is_some()))
}

fn index_candidates(collection: &CollectionHandle, spec: &QuerySpec, multikey: &MultikeyIndexes) -> Vec<Access> {
    let filter = &spec.filter_document;
    let mut candidates: Vec<Access> = collection
        .index_views()
        .filter(|index| usable(index, filter, spec.collator()))
        .filter_map(|index| {
            let index_multikey = multikey.of(&index);
            let mut candidate = candidates::index_candidate(&index, &spec.filter, spec.sort.as_ref(), &index_multikey)?;
            candidate.scan.set_multikey(&index, &index_multikey);
            candidate.scan.cover(spec, uncoverable(&index));
            Some(Access::IndexScan(candidate.scan))
        })
        .collect();
    candidates.extend(or_candidate(collection, filter, spec.collator(), multikey).map(Access::Or));
    candidates
}

/// The union plan of a top-level `$or`: for each branch the index that bounds most of its
/// fields (equalities first); None when some branch has no index, since that branch would
/// need a collection scan anyway.
fn or_candidate(collection: &CollectionHandle, filter: &Document, collator: Option<&Arc<Collator>>, multikey: &MultikeyIndexes) -> Option<OrScan> {
    let Some(Bson::Array(branches)) = filter.get("$or") else { return None };
    let mut scans = Vec::with_capacity(branches.len());
    for branch in branches {
        let Bson::Document(branch) = branch else { return None };
        let parsed = Filter::parse(branch).ok()?.with_collator(collator.cloned());
        let best = collection
            .index_views()
            .filter(|index| usable(index, branch, collator))
            .filter_map(|index| {
                let index_multikey = multikey.of(&index);
                let mut candidate = candidates::index_candidate(&index, &parsed, None, &index_multikey)?;
                candidate.scan.set_multikey(&index, &index_multikey);
                Some(candidate)
            })
            .max_by_key(|candidate| (candidate.equality_fields, candidate.bounded_fields))?;
        scans.push(best.scan);
    }
    Some(OrScan { branches: scans, current_branch: 0, seen_record_ids: HashSet::new() })
}

/// Several candidates: the cached winner for this query shape, else trial runs.
fn choose_among(
    backend: &dyn Backend,
    collection: &CollectionHandle,
    spec: &QuerySpec,
    candidates: Vec<Access>,
    run_trial: &TrialRunner<'_>,
) -> CommandResult<PlannedQuery> {
    let cache_key = cache::CacheKey::new(collection, spec);
    let cached = cache::lookup(&cache_key).and_then(|winner| candidates.iter().position(|candidate| candidate.describe() == winner));
    if let Some(position) = cached {
        let access = candidates.into_iter().nth(position).expect("the position was just found");
        return Ok(PlannedQuery { access, rejected: Vec::new(), winner_trial: None, from_plan_cache: true });
    }
    // The trial trees go into explain's rejectedPlans: give their scans the multikey flag.
    let multikey = MultikeyIndexes::new(backend, collection, true);
    let mut candidates = candidates;
    for candidate in &mut candidates {
        fill_multikey(candidate, collection, &multikey);
    }
    let (winner, mut outcomes) = trial::run_trials(spec, candidates, run_trial)?;
    let winner_trial = outcomes.remove(winner);
    let tree = cache::strip_statistics(&winner_trial.stages);
    cache::store(cache_key, winner_trial.access.describe(), tree, winner_trial.works);
    Ok(PlannedQuery { access: winner_trial.access.clone(), rejected: outcomes, winner_trial: Some(winner_trial), from_plan_cache: false })
}

/// What the planner knows of the collection's indexes' multikey paths: the tracked paths
/// (`Backend::multikey_paths`), and for indexes created before paths were tracked, whether the
/// counters show several keys per document (read only when the query sorts: an index with as
/// many entries as the collection has documents has one key per document).
pub struct MultikeyIndexes {
    tracked: Vec<(String, Option<myriad_storage::MultikeyPaths>)>,
    /// Untracked indexes with one key per document; None when the counters were not read.
    single_key_by_counters: Option<Vec<String>>,
}

impl MultikeyIndexes {
    pub fn new(backend: &dyn Backend, collection: &CollectionHandle, counters_needed: bool) -> MultikeyIndexes {
        // Unknown paths count as multikey, so nothing relies on an index being single-key.
        let tracked = backend.multikey_paths(collection).unwrap_or_default();
        let untracked_exist = collection.index_views().any(|index| !tracked.iter().any(|(name, paths)| name == index.name() && paths.is_some()));
        if !counters_needed || !untracked_exist {
            return MultikeyIndexes { tracked, single_key_by_counters: None };
        }
        // A sparse or partial index can be multikey with fewer entries than documents: it
        // counts as multikey.
        let single_key_by_counters = backend.collection_stats(collection).ok().map(|stats| {
            collection
                .index_views()
                .filter(|index| !index.sparse() && !index.is_partial())
                .filter(|index| stats.index_entries.iter().any(|(name, entries)| name == index.name() && *entries <= stats.count))
                .map(|index| index.name().to_string())
                .collect()
        });
        MultikeyIndexes { tracked, single_key_by_counters }
    }

    /// The multikey paths of `index`.
    pub fn of(&self, index: &IndexView<'_>) -> candidates::IndexMultikey {
        let field_count = index.fields().count();
        match self.tracked.iter().find(|(name, _)| name == index.name()) {
            Some((_, Some(paths))) => {
                let mut masks = paths.clone();
                masks.resize(field_count, 0);
                candidates::IndexMultikey::tracked(masks)
            }
            _ => {
                let single = self.single_key_by_counters.as_ref().is_some_and(|names| names.iter().any(|name| name == index.name()));
                let mut untracked = candidates::IndexMultikey::untracked(field_count, single);
                if self.single_key_by_counters.is_none() {
                    // Unknown (counters unread): shown as multikey.
                    untracked.single_key_by_counters = false;
                }
                untracked
            }
        }
    }
}

fn has_hashed_field(index: &IndexView<'_>) -> bool {
    index.fields().any(|(_, kind)| kind == myriad_storage::IndexFieldKind::Hashed)
}

/// True when the index's entries cannot give back the values: a hashed field, or a collation
/// (its keys are comparison values).
fn uncoverable(index: &IndexView<'_>) -> bool {
    has_hashed_field(index) || index.collator().is_some()
}

/// True when `index` holds every document `filter` can match: not sparse (a sparse index
/// lacks documents missing its fields), and not partial unless the filter implies its
/// partial filter under the same collation (the implication is read on the documents, so it
/// holds only when both compare strings alike).
fn usable(index: &IndexView<'_>, filter: &Document, query_collator: Option<&Arc<Collator>>) -> bool {
    if index.sparse() {
        return false;
    }
    match index.partial_filter_expression() {
        Some(expression) => {
            myriad_collation::same_collation(index.collator().map(|collator| &**collator), query_collator.map(|collator| &**collator))
                && partial::implies(filter, &expression)
        }
        None => true,
    }
}

/// Sets the multikey fields of every index scan of `access` that does not know them yet.
pub fn fill_multikey(access: &mut Access, collection: &CollectionHandle, multikey: &MultikeyIndexes) {
    let scans: Vec<&mut IndexScan> = match access {
        Access::IndexScan(scan) => vec![scan],
        Access::Or(union) => union.branches.iter_mut().collect(),
        Access::IdLookup { .. } | Access::CollectionScan { .. } => Vec::new(),
    };
    for scan in scans {
        if scan.multikey.is_none() {
            if let Some(index) = collection.index_views().find(|index| index.name() == scan.index_name) {
                scan.set_multikey(&index, &multikey.of(&index));
            }
        }
    }
}

/// True when `pattern` names the index's key fields in order with equal values, compared as
/// MongoDB compares BSON (so `{a: 1}` from one driver names the index `{a: 1.0}` from another).
fn same_key_pattern(index: &IndexView<'_>, pattern: &Document) -> bool {
    let stored = index.key_pattern();
    let mut stored_fields = stored.iter();
    for (field, value) in pattern {
        let Some(Ok((stored_field, stored_value))) = stored_fields.next() else { return false };
        let Ok(stored_value) = Bson::try_from(stored_value) else { return false };
        if stored_field != field || !myriad_keystring::compare::values_equal(&stored_value, value) {
            return false;
        }
    }
    stored_fields.next().is_none()
}

/// The value of a filter that is exactly `{_id: value}` or `{_id: {$eq: value}}`, where the
/// value matches only itself (not a regex, array, document with operators, null or
/// undefined, which match more or other documents).
pub fn id_equality(filter: &Document) -> Option<&Bson> {
    if filter.len() != 1 {
        return None;
    }
    let value = filter.get("_id")?;
    let value = match value {
        Bson::Document(operators) if operators.len() == 1 => operators.get("$eq")?,
        other => other,
    };
    match value {
        Bson::String(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::ObjectId(_) | Bson::Boolean(_)
        | Bson::DateTime(_) | Bson::Binary(_) | Bson::Decimal128(_) | Bson::Timestamp(_) => Some(value),
        Bson::Document(document) if !document.keys().any(|key| key.starts_with('$')) => Some(value),
        _ => None,
    }
}
