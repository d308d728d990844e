// Methods: `&self`, `&mut self`, `self`, `Self`, borrowed returns, trait
// default methods; visibility, doc comments and other attributes are kept.
use leader_runtime::leader_only;

pub struct Job {
    name: String,
    runs: u32,
}

impl Job {
    /// Doc comments stay on the method.
    #[leader_only(group = "jobs")]
    #[inline]
    pub fn name(&self) -> &str {
        &self.name
    }

    #[leader_only(group = "jobs")]
    pub(crate) fn bump(&mut self, by: u32) -> u32 {
        self.runs += by;
        self.runs
    }

    #[leader_only(group = "jobs")]
    fn into_name(self) -> String {
        self.name
    }

    #[leader_only(group = "jobs")]
    fn renamed(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    #[leader_only(group = "jobs")]
    async fn async_name(&self) -> &str {
        &self.name
    }

    #[leader_only(group = "jobs", cancel_on_loss)]
    async fn async_bump(&mut self) -> u32 {
        self.runs += 1;
        self.runs
    }

    #[leader_only(group = "jobs")]
    async fn async_into_name(self) -> String {
        self.name
    }

    #[leader_only(group = "jobs")]
    #[must_use]
    fn pick<'a>(&self, a: &'a str, _b: &str) -> &'a str {
        a
    }
}

trait Task {
    fn id(&self) -> u32;

    #[leader_only(group = "tasks")]
    fn run(&self) -> u32 {
        self.id()
    }
}

impl Task for Job {
    fn id(&self) -> u32 {
        self.runs
    }
}

fn main() {
    let _: fn(&Job) -> Option<&str> = Job::name;
    let _: fn(&mut Job, u32) -> Option<u32> = Job::bump;
    let _: fn(Job) -> Option<String> = Job::into_name;
    let _: fn(Job, &str) -> Option<Job> = Job::renamed;
    let _: for<'a> fn(&Job, &'a str, &str) -> Option<&'a str> = Job::pick;
    let _: fn(&Job) -> Option<u32> = <Job as Task>::run;
    let mut job = Job {
        name: String::new(),
        runs: 0,
    };
    drop(job.async_name());
    drop(job.async_bump());
    drop(job.async_into_name());
}
