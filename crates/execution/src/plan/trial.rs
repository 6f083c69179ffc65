//! Trial runs: when several index scans could answer a query, each runs for a bounded amount
//! of work and the most productive one wins, as MongoDB's multi-planner decides.
//!
//! Each candidate reads until it has produced [`TRIAL_RESULTS`] matches, reached its end (or
//! its limit), or done [`TRIAL_WORKS`] units of work (index keys plus documents examined). A
//! plan that needs a blocking sort produces nothing until its input ends, as in MongoDB.
//! Score: matches per unit of work, plus 1 for reaching the end, plus a small bonus for a plan
//! whose order is the sort's (MongoDB's `noSortBonus`). Ties keep the earlier candidate (index
//! creation order). The trial reads are thrown away; the winner starts again from the
//! beginning, so a trial never changes what the query returns.
//!
//! The planner does not run queries: its caller passes a [`TrialRunner`] (crate::execution
//! runs a candidate as a query), so the planner never depends on the executor.

use bson::Document;

use myriad_reply::error::CommandResult;

use super::{Access, QuerySpec};

/// MongoDB's `internalQueryPlanEvaluationWorks`.
pub const TRIAL_WORKS: u64 = 10_000;
/// MongoDB's default first batch: a plan that fills it has shown enough.
pub const TRIAL_RESULTS: u64 = 101;

/// What one candidate did during its trial.
#[derive(Clone, Debug)]
pub struct TrialOutcome {
    pub access: Access,
    pub works: u64,
    pub keys_examined: u64,
    pub documents_examined: u64,
    pub results: u64,
    pub reached_end: bool,
    pub score: f64,
    /// The candidate's stage tree with its trial counters (explain's `allPlansExecution`).
    pub stages: Document,
}

/// What a candidate did in its trial run, as its [`TrialRunner`] measured it.
pub struct TrialRun {
    pub works: u64,
    pub results: u64,
    pub reached_end: bool,
    pub keys_examined: u64,
    pub documents_examined: u64,
    /// The candidate's stage tree with its trial counters.
    pub stages: Document,
}

/// Runs the query over one candidate access path from its start, for at most `max_works`
/// units of work and `max_results` matches.
pub type TrialRunner<'runner> = dyn Fn(&Access, u64, u64) -> CommandResult<TrialRun> + 'runner;

/// Runs every candidate's trial; returns the winner's position and every outcome, in
/// candidate order.
pub fn run_trials(spec: &QuerySpec, candidates: Vec<Access>, run_trial: &TrialRunner<'_>) -> CommandResult<(usize, Vec<TrialOutcome>)> {
    let mut outcomes = Vec::with_capacity(candidates.len());
    for access in candidates {
        let TrialRun { works, results, reached_end, keys_examined, documents_examined, stages } = run_trial(&access, TRIAL_WORKS, TRIAL_RESULTS)?;
        let blocking_sort = spec.sort.is_some() && !access.provides_sort();
        let score = 1.0
            + results as f64 / works.max(1) as f64
            + if reached_end { 1.0 } else { 0.0 }
            + if blocking_sort { 0.0 } else { 1e-4 };
        outcomes.push(TrialOutcome { access, works, keys_examined, documents_examined, results, reached_end, score, stages });
    }
    let mut winner = 0;
    for (position, outcome) in outcomes.iter().enumerate() {
        if outcome.score > outcomes[winner].score {
            winner = position;
        }
    }
    Ok((winner, outcomes))
}
