//! An explicit-state model checker: breadth-first over every state a model
//! reaches, each state kept once, so that the first violation found of a
//! property is one of its shortest traces.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::hash::Hash;

use indexmap::IndexSet;

/// A system to explore: its first states, the steps each state allows, and
/// where each step leads.
pub trait Model {
    /// One state of the whole system.
    type State: Clone + Eq + Hash + Debug;
    /// One step.
    type Action: Clone + Debug;

    /// The states it starts in.
    fn init(&self) -> Vec<Self::State>;
    /// The steps `state` allows, pushed onto `actions`.
    fn actions(&self, state: &Self::State, actions: &mut Vec<Self::Action>);
    /// Where `action` leads from `state` (`None`: nowhere new).
    fn next(&self, state: &Self::State, action: &Self::Action) -> Option<Self::State>;
    /// What must hold in every state, and what some state must show.
    fn properties(&self) -> Vec<Property<Self>>;
}

/// A property of the states a model reaches.
pub struct Property<M: Model + ?Sized> {
    /// What it says.
    pub name: &'static str,
    /// Whether it must hold everywhere or somewhere.
    pub expect: Expect,
    /// What it reads: the state alone, or the step into it too.
    pub on: On,
    /// Whether it holds in a state.
    pub holds: fn(&M, &M::State) -> bool,
}

impl<M: Model + ?Sized> Clone for Property<M> {
    fn clone(&self) -> Self {
        Self {
            name: self.name,
            expect: self.expect,
            on: self.on,
            holds: self.holds,
        }
    }
}

/// How a property is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// In every reachable state (a safety property).
    Always,
    /// In at least one reachable state: the companion that shows an
    /// `Always` property is not kept vacuously (the case it guards happens).
    Sometimes,
}

/// What a property reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// The state alone: judged once per distinct state.
    State,
    /// What the step into the state did too: judged on every step, also
    /// into a state reached before.
    Step,
}

/// A path from a first state: each step and the state it led to.
#[derive(Debug, Clone)]
pub struct Trace<M: Model> {
    /// The first state.
    pub init: M::State,
    /// The steps, each with the state it led to.
    pub steps: Vec<(M::Action, M::State)>,
}

/// What an exploration found.
#[derive(Debug)]
pub struct Report<M: Model> {
    /// Distinct states reached.
    pub states: usize,
    /// The longest of the shortest paths to them.
    pub depth: usize,
    /// Whether every reachable state was explored (not cut at the limit).
    pub complete: bool,
    /// `Always` properties broken: the name and a shortest trace.
    pub violations: Vec<(&'static str, Trace<M>)>,
    /// `Sometimes` properties shown: the name and a shortest trace.
    pub examples: Vec<(&'static str, Trace<M>)>,
}

impl<M: Model> Report<M> {
    /// The trace breaking `name`, if any.
    pub fn violation(&self, name: &str) -> Option<&Trace<M>> {
        self.violations
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t)
    }

    /// Whether some state showed `name`.
    pub fn shown(&self, name: &str) -> bool {
        self.examples.iter().any(|(n, _)| *n == name)
    }
}

/// Explores every state `model` reaches (at most `limit`), breadth first.
pub fn check<M: Model>(model: &M, limit: usize) -> Report<M> {
    explore(model, limit, None)
}

/// Explores `model` until the property named `property` is broken (its
/// shortest counterexample found), or every state is explored.
pub fn refute<M: Model>(model: &M, limit: usize, property: &str) -> Report<M> {
    explore(model, limit, Some(property))
}

fn explore<M: Model>(model: &M, limit: usize, stop_at: Option<&str>) -> Report<M> {
    let mut explorer = Explorer {
        model,
        properties: model.properties(),
        seen: IndexSet::new(),
        parents: Vec::new(),
        report: Report {
            states: 0,
            depth: 0,
            complete: true,
            violations: Vec::new(),
            examples: Vec::new(),
        },
    };
    let mut queue = VecDeque::new();
    for state in model.init() {
        explorer.judge(None, &state, true);
        let (index, new) = explorer.seen.insert_full(state);
        if new {
            explorer.parents.push(None);
            queue.push_back((index, 0));
        }
    }
    let mut actions = Vec::new();
    while let Some((index, depth)) = queue.pop_front() {
        let state = explorer.seen[index].clone();
        actions.clear();
        model.actions(&state, &mut actions);
        for action in &actions {
            let Some(next) = model.next(&state, action) else {
                continue;
            };
            let new = !explorer.seen.contains(&next);
            explorer.judge(Some((index, action)), &next, new);
            if let Some(property) = stop_at
                && explorer.report.violation(property).is_some()
            {
                explorer.report.states = explorer.seen.len();
                explorer.report.complete = false;
                return explorer.report;
            }
            if !new {
                continue;
            }
            if explorer.seen.len() >= limit {
                explorer.report.complete = false;
                continue;
            }
            let (next_index, _) = explorer.seen.insert_full(next);
            explorer.parents.push(Some((index, action.clone())));
            explorer.report.depth = explorer.report.depth.max(depth + 1);
            queue.push_back((next_index, depth + 1));
        }
    }
    explorer.report.states = explorer.seen.len();
    explorer.report
}

/// The exploration under way.
struct Explorer<'m, M: Model> {
    model: &'m M,
    properties: Vec<Property<M>>,
    seen: IndexSet<M::State>,
    /// For each state (by index): the state it was first reached from, and
    /// the step.
    parents: Vec<Option<(usize, M::Action)>>,
    report: Report<M>,
}

impl<M: Model> Explorer<'_, M> {
    /// Judges `state`, reached by `step` (from the state at an index; `None`
    /// for a first state); `new`: not seen before.
    fn judge(&mut self, step: Option<(usize, &M::Action)>, state: &M::State, new: bool) {
        for property in &self.properties {
            if !new && property.on == On::State {
                continue;
            }
            let found = match property.expect {
                Expect::Always => &self.report.violations,
                Expect::Sometimes => &self.report.examples,
            };
            if found.iter().any(|(name, _)| *name == property.name) {
                continue;
            }
            let holds = (property.holds)(self.model, state);
            if holds != (property.expect == Expect::Sometimes) {
                continue;
            }
            let trace = match step {
                None => Trace {
                    init: state.clone(),
                    steps: Vec::new(),
                },
                Some((parent, action)) => {
                    let mut trace = trace(&self.seen, &self.parents, parent);
                    trace.steps.push((action.clone(), state.clone()));
                    trace
                }
            };
            match property.expect {
                Expect::Always => self.report.violations.push((property.name, trace)),
                Expect::Sometimes => self.report.examples.push((property.name, trace)),
            }
        }
    }
}

/// The path to the state at `index`.
fn trace<M: Model>(
    seen: &IndexSet<M::State>,
    parents: &[Option<(usize, M::Action)>],
    mut index: usize,
) -> Trace<M> {
    let mut steps = Vec::new();
    while let Some((parent, action)) = &parents[index] {
        steps.push((action.clone(), seen[index].clone()));
        index = *parent;
    }
    steps.reverse();
    Trace {
        init: seen[index].clone(),
        steps,
    }
}
