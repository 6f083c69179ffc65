//! The planner's differential check, shared by the `planner_differential` fuzz target and the
//! property test of myriad-execution (crates/execution/tests/planner_differential.rs includes
//! this file). The bytes choose a collection (documents of every BSON type, arrays, nested
//! documents, missing fields), its indexes (single, compound, descending, multikey, sparse,
//! partial, unique, hashed, collated) and a query (filter, sort, projection, skip, limit,
//! collation); every plan the planner could run must then return what a forced collection scan
//! returns:
//! - the planner's own choice (trial runs and the plan cache included);
//! - each candidate it weighs, forced ([`candidate_plans`]);
//! - each index forced by `hint` (except sparse ones, whose hinted results may be incomplete, as
//!   in MongoDB).
//!
//! "The same" means: with a sort, the same sort keys in the same order and, within a run of
//! equal sort keys, the same documents in any order; without a sort, the same documents in any
//! order. Where a skip or limit cuts a run of ties (or, without a sort, cuts anywhere), the
//! plan may pick other documents of that run, so those must only be matches of the query.
//! A disagreement panics with the case.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use myriad_execution::execution::Execution;
use myriad_execution::plan::{candidate_plans, Access, QuerySpec};
use myriad_query::projection::Projection;
use myriad_query::sort::SortSpec;
use myriad_storage::{CollectionHandle, Durability, Engine};

/// Field paths the documents, indexes and queries use.
/// Field paths the documents, indexes and queries use, the first ones more often, so that
/// queries meet indexes.
const PATHS: [&str; 9] = ["a", "a", "b", "b", "a.x", "a.x", "c", "b.y", "_id"];
const MAX_DOCUMENTS: usize = 24;
const MAX_INDEXES: usize = 3;
/// Batches read from one plan before the check gives up on it as looping.
const MAX_BATCHES: usize = 1_000;

/// Bytes read as choices; past the end every choice is 0 (the smallest case).
struct Source<'a> {
    data: &'a [u8],
    position: usize,
}

impl Source<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.position).copied().unwrap_or(0);
        self.position += 1;
        byte
    }

    fn below(&mut self, bound: usize) -> usize {
        usize::from(self.byte()) % bound
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn path(&mut self) -> &'static str {
        PATHS[self.below(PATHS.len())]
    }
}

fn scalar(source: &mut Source) -> Bson {
    // One choice in three is a small number or a short string, so equalities find matches.
    match source.below(33) {
        22..=26 => return Bson::Int32(source.below(3) as i32),
        27..=30 => return Bson::String(["a", "b", "B"][source.below(3)].into()),
        31..=32 => return Bson::Double(1.5),
        _ => {}
    }
    match source.below(22) {
        0 => Bson::Null,
        1 => Bson::Int32(0),
        2 => Bson::Int32(1),
        3 => Bson::Int32(2),
        4 => Bson::Int32(-1),
        5 => Bson::Int64(2),
        6 => Bson::Double(1.5),
        7 => Bson::Double(2.0),
        8 => Bson::Double(f64::NAN),
        9 => Bson::Double(-0.0),
        10 => Bson::String("a".into()),
        11 => Bson::String("B".into()),
        12 => Bson::String("b".into()),
        13 => Bson::String(String::new()),
        14 => Bson::Boolean(true),
        15 => Bson::Boolean(false),
        16 => Bson::DateTime(DateTime::from_millis(0)),
        17 => Bson::MinKey,
        18 => Bson::MaxKey,
        19 => Bson::ObjectId(ObjectId::from_bytes([1; 12])),
        20 => Bson::Timestamp(bson::Timestamp { time: 1, increment: 1 }),
        _ => Bson::Binary(bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1] }),
    }
}

fn value(source: &mut Source, depth: usize) -> Bson {
    match source.below(10) {
        7 if depth > 0 => Bson::Array((0..source.below(4)).map(|_| value(source, depth - 1)).collect()),
        8 if depth > 0 => {
            let mut nested = Document::new();
            for field in ["x", "y"] {
                if source.below(3) != 0 {
                    nested.insert(field, value(source, depth - 1));
                }
            }
            Bson::Document(nested)
        }
        _ => scalar(source),
    }
}

fn stored_document(source: &mut Source, id: i32) -> Document {
    let mut document = doc! { "_id": id };
    for field in ["a", "b", "c"] {
        if source.below(5) != 0 {
            document.insert(field, value(source, 2));
        }
    }
    document
}

fn collation(locale: &str) -> Document {
    let parsed = myriad_collation::parse(&doc! { "locale": locale, "strength": 2 }).expect("a valid collation");
    parsed.expect("not the simple collation").to_document()
}

fn index_spec(source: &mut Source, number: usize) -> Document {
    let mut key = Document::new();
    for _ in 0..1 + source.below(2) {
        let path = source.path();
        let direction = match source.below(7) {
            0..=2 => Bson::Int32(1),
            3..=5 => Bson::Int32(-1),
            _ if key.values().any(|direction| direction == &Bson::String("hashed".into())) => Bson::Int32(1),
            _ => Bson::String("hashed".into()),
        };
        key.insert(path, direction);
    }
    let first = key.keys().next().expect("one field").clone();
    let mut spec = doc! { "key": key, "name": format!("index{number}") };
    if source.below(6) == 0 {
        spec.insert("sparse", true);
    }
    if source.below(8) == 0 {
        spec.insert("unique", true);
    }
    match source.below(8) {
        0 => drop(spec.insert("partialFilterExpression", doc! { first: { "$exists": true } })),
        1 => drop(spec.insert("partialFilterExpression", doc! { first: { "$gte": 0 } })),
        _ => {}
    }
    if source.below(4) == 0 {
        spec.insert("collation", collation("en"));
    }
    spec
}

fn leaf(source: &mut Source) -> Document {
    let path = source.path();
    let condition = match source.below(11) {
        0 => return doc! { path: value(source, 1) },
        1..=3 => {
            let operator = ["$eq", "$gt", "$gte", "$lt", "$lte", "$ne"][source.below(6)];
            doc! { operator: scalar(source) }
        }
        4 => {
            let operator = if source.below(3) == 0 { "$nin" } else { "$in" };
            let values: Vec<Bson> = (0..source.below(4)).map(|_| value(source, 1)).collect();
            doc! { operator: values }
        }
        5 if source.flag() => doc! { "$exists": source.flag() },
        5 => {
            let type_name = ["string", "number", "array", "null", "object"][source.below(5)];
            doc! { "$type": type_name }
        }
        6 => doc! { "$elemMatch": { "$gte": scalar(source) } },
        7 => doc! { "$not": { "$gt": scalar(source) } },
        8 => {
            let pattern = ["^a", "b", "^$", "^B"][source.below(4)];
            if source.flag() { doc! { "$regex": pattern, "$options": "i" } } else { doc! { "$regex": pattern } }
        }
        9 => doc! { "$all": (0..1 + source.below(2)).map(|_| scalar(source)).collect::<Vec<Bson>>() },
        _ => doc! { "$gt": scalar(source), "$lte": scalar(source) },
    };
    doc! { path: condition }
}

fn filter(source: &mut Source, depth: usize) -> Document {
    if depth > 0 && source.below(5) == 0 {
        let operator = ["$and", "$or", "$nor"][source.below(3)];
        let branches: Vec<Bson> = (0..1 + source.below(3)).map(|_| Bson::Document(filter(source, depth - 1))).collect();
        return doc! { operator: branches };
    }
    let mut combined = Document::new();
    for _ in 0..source.below(3).min(1 + source.below(2)) {
        combined.extend(leaf(source));
    }
    combined
}

/// The query, parsed as find parses it; None when the bytes chose something find refuses.
fn query(source: &mut Source) -> Option<QuerySpec> {
    let mut spec = QuerySpec::for_filter(filter(source, 2)).ok()?;
    let mut sort_paths = Vec::new();
    if source.below(3) != 0 {
        let mut sort = Document::new();
        for _ in 0..1 + source.below(2) {
            let path = source.path();
            sort.insert(path, if source.flag() { 1 } else { -1 });
            sort_paths.push(path);
        }
        spec.sort = Some(SortSpec::parse(&sort).ok()?);
    }
    let projection = match source.below(4) {
        // Inclusion keeps the sort's fields, so the sort keys of the results can be compared.
        1 => {
            let mut projection: Document = sort_paths.iter().map(|path| (path.to_string(), Bson::Int32(1))).collect();
            for _ in 0..source.below(3) {
                projection.insert(source.path(), 1);
            }
            if source.flag() && !sort_paths.contains(&"_id") {
                projection.insert("_id", 0);
            }
            Some(projection)
        }
        2 => {
            let excluded = source.path();
            (!sort_paths.iter().any(|path| path.starts_with(excluded) || excluded.starts_with(path))).then(|| doc! { excluded: 0 })
        }
        _ => None,
    };
    spec.projection = match projection {
        Some(projection) => Some(Projection::parse(&projection).ok()?),
        None => None,
    };
    if source.below(4) == 0 {
        spec.skip = 1 + source.below(3) as u64;
    }
    if source.below(3) == 0 {
        spec.limit = Some(1 + source.below(5) as u64);
    }
    if source.below(3) == 0 {
        spec.collation = Some(myriad_collation::parse(&doc! { "locale": "en", "strength": 2 }).ok()?);
    }
    Some(spec)
}

/// Every document a plan returns, batch after batch.
fn run_plan(engine: &Engine, mut execution: Execution) -> Result<Vec<Document>, String> {
    let mut documents = Vec::new();
    for _ in 0..MAX_BATCHES {
        let batch = execution.next_batch(engine, 7).map_err(|error| format!("{error:?}"))?;
        documents.extend(batch.iter().map(|raw| raw.to_document().expect("a plan returns valid BSON")));
        if execution.is_exhausted() {
            return Ok(documents);
        }
    }
    panic!("a plan was still returning documents after {MAX_BATCHES} batches");
}

fn bytes_of(documents: &[Document]) -> Vec<Vec<u8>> {
    let mut bytes: Vec<Vec<u8>> = documents.iter().map(|document| bson::to_vec(document).expect("serialisable")).collect();
    bytes.sort();
    bytes
}

/// True when every document of `part` is one of `whole` (as many times as it is there).
fn is_sub_multiset(part: &[Document], whole: &[Document]) -> bool {
    let mut remaining = bytes_of(whole);
    bytes_of(part).into_iter().all(|bytes| match remaining.binary_search(&bytes) {
        Ok(position) => {
            remaining.remove(position);
            true
        }
        Err(_) => false,
    })
}

/// Checks `actual` against the collection scan's `expected` (see the module documentation);
/// `every_match` is the scan's answer without skip and limit.
fn compare(spec: &QuerySpec, expected: &[Document], actual: &[Document], every_match: &[Document]) -> Result<(), String> {
    if expected.len() != actual.len() {
        return Err(format!("{} documents, the collection scan returns {}", actual.len(), expected.len()));
    }
    let cut = spec.skip > 0 || spec.limit.is_some();
    let Some(sort) = &spec.sort else {
        let agrees = if cut { is_sub_multiset(actual, every_match) } else { bytes_of(expected) == bytes_of(actual) };
        return if agrees { Ok(()) } else { Err("other documents than the collection scan".into()) };
    };
    if let Some(position) = (0..expected.len()).find(|&position| sort.compare(&expected[position], &actual[position]).is_ne()) {
        return Err(format!("another sort key at position {position}"));
    }
    let mut start = 0;
    while start < expected.len() {
        let end = (start..expected.len()).find(|&position| sort.compare(&expected[start], &expected[position]).is_ne()).unwrap_or(expected.len());
        let at_a_cut = cut && (start == 0 || end == expected.len());
        let agrees = if at_a_cut { is_sub_multiset(&actual[start..end], every_match) } else { bytes_of(&expected[start..end]) == bytes_of(&actual[start..end]) };
        if !agrees {
            return Err(format!("other documents among the equal sort keys at positions {start}..{end}"));
        }
        start = end;
    }
    Ok(())
}

static COLLECTIONS: AtomicU64 = AtomicU64::new(0);

/// Builds the collection the bytes describe in `engine` (a new one per call, dropped after)
/// and checks every plan of the query they describe.
pub fn check_plans(engine: &Engine, data: &[u8]) {
    let mut source = Source { data, position: 0 };
    let name = format!("differential{}", COLLECTIONS.fetch_add(1, AtomicOrdering::Relaxed));
    // Sometimes a default collation, which the indexes and queries without one then take.
    let options = if source.below(6) == 0 { doc! { "collation": collation("en") } } else { Document::new() };
    // The indexes and query first: past the end of the bytes the documents are all alike.
    let indexes: Vec<Document> = (0..source.below(MAX_INDEXES + 1)).map(|number| index_spec(&mut source, number)).collect();
    let Some(spec) = query(&mut source) else { return };
    let documents: Vec<Document> = (0..MAX_DOCUMENTS / 2 + source.below(MAX_DOCUMENTS / 2 + 1)).map(|id| stored_document(&mut source, id as i32)).collect();
    engine.create_collection("differential", &name, options.clone()).expect("create the collection");
    let built: Vec<&Document> = indexes.iter().filter(|spec| engine.create_indexes("differential", &name, vec![(*spec).clone()]).is_ok()).collect();
    let handle = || engine.collection("differential", &name).expect("catalog").expect("the collection");
    for document in &documents {
        let mut transaction = engine.begin_write(&handle());
        // Refused documents (a duplicate of a unique key, an array under a hashed key) are skipped.
        if transaction.insert(document).is_ok() {
            transaction.commit(Durability::Default).expect("commit");
        }
    }
    let outcome = check_collection(engine, handle(), spec);
    engine.drop_collection("differential", &name).expect("drop");
    if let Err(disagreement) = outcome {
        panic!("{disagreement}\ncollection options {options}\nindexes {built:?}\ndocuments {documents:?}");
    }
}

fn check_collection(engine: &Engine, collection: CollectionHandle, spec: QuerySpec) -> Result<(), String> {
    let resolved = spec.clone().with_collation(&collection);
    let describe = || format!("filter {} sort {:?} projection {:?} skip {} limit {:?} collation {:?}", resolved.filter_document, resolved.sort.as_ref().map(SortSpec::pattern), resolved.projection.is_some(), resolved.skip, resolved.limit, resolved.collator().map(|collator| collator.to_document()));
    let scan = |spec: QuerySpec| Execution::with_access(collection.clone(), spec, Access::CollectionScan { last_record_id: None });
    // A query the collection scan refuses (a sort over too much, say) has nothing to compare.
    let Ok(expected) = run_plan(engine, scan(resolved.clone())) else { return Ok(()) };
    let every_match = run_plan(engine, scan(QuerySpec { skip: 0, limit: None, ..resolved.clone() })).map_err(|error| format!("{error} without skip and limit"))?;
    let mut plans: Vec<(String, Result<Execution, String>)> = Vec::new();
    plans.push(("the planner's choice".into(), Execution::new(engine, collection.clone(), spec.clone()).map_err(|error| format!("{error:?}"))));
    for access in candidate_plans(engine, &collection, &resolved) {
        plans.push((format!("the candidate {}", access.describe()), Ok(Execution::with_access(collection.clone(), resolved.clone(), access))));
    }
    for index in collection.index_views().filter(|index| !index.sparse()) {
        let hinted = QuerySpec { hint: Some(Bson::String(index.name().to_string())), ..spec.clone() };
        match Execution::new(engine, collection.clone(), hinted) {
            Ok(execution) => plans.push((format!("the hinted index {}", index.name()), Ok(execution))),
            // A partial index the query does not imply is refused as a hint, as in MongoDB.
            Err(error) if index.partial_filter_expression().is_some() && error.code == myriad_reply::error::BAD_VALUE.code => {}
            Err(error) => plans.push((format!("the hinted index {}", index.name()), Err(format!("{error:?}")))),
        }
    }
    for (label, execution) in plans {
        let actual = execution.and_then(|execution| run_plan(engine, execution)).map_err(|error| format!("{label} failed: {error}\nquery {}", describe()))?;
        compare(&resolved, &expected, &actual, &every_match).map_err(|error| format!("{label} returned {error}\nquery {}\nexpected {expected:?}\nactual {actual:?}", describe()))?;
    }
    Ok(())
}

/// An engine in a temporary directory, for the fuzz target and the tests.
pub fn engine(directory: &std::path::Path) -> Arc<Engine> {
    let options = myriad_storage::EngineOptions { block_cache_size_bytes: 8 * 1024 * 1024, ..myriad_storage::EngineOptions::default() };
    Arc::new(Engine::open(directory, &options).expect("open the engine"))
}
