// The status page's behaviour: polls the coordinator's JSON API (coordinator/http_routes.h)
// every POLL_MS, redraws the job and worker tables, and appends the new steps of one job
// (the one named in the URL's #fragment, else the newest running one) to a Chart.js line
// chart of loss and tokens/s.
//
// Tests read the DOM: rows carry data-job/data-state and data-worker/data-alive; the
// canvas carries data-job, data-points (steps plotted) and data-last-step; the ranks
// table's rows carry data-rank and the table data-ranks (how many); <body>
// data-loaded turns "true" after the first successful poll. Text from the server is only
// ever set as textContent, never parsed as HTML.
'use strict';

(function () {
  const POLL_MS = 2000;
  // Steps asked for per request; a long job's history arrives over a few requests.
  const STEPS_PER_REQUEST = 5000;
  // Points kept in the chart; older ones are dropped (the decimation plugin thins what is
  // drawn, this bounds memory for jobs of millions of steps).
  const MAX_POINTS = 100000;
  const ACTIVE_STATES = ['RUNNING', 'PLACING'];

  const chartCanvas = document.getElementById('chart');
  const chartMessage = document.getElementById('chart-message');
  const chartTitle = document.getElementById('chart-title');
  const errorBanner = document.getElementById('error');

  // What the chart shows: which job, which of its generations (a restart from a checkpoint
  // replays steps, so a new generation redraws from scratch), and the last step plotted.
  const plotted = {jobId: null, generation: null, lastStep: 0};
  let chart = null;

  function setChartMessage(text) {
    chartMessage.textContent = text;
    chartMessage.hidden = text === '';
  }

  function createChart() {
    if (typeof window.Chart === 'undefined') {
      const reason = window.mtrainChartMissing || 'it did not load';
      setChartMessage('The chart library is missing (' + reason + '); the tables below ' +
                      'still update. Start the coordinator with --chart_js=PATH to Chart.js.');
      return null;
    }
    const axis = (title, position) => ({
      type: 'linear',
      position: position,
      title: {display: true, text: title},
    });
    return new window.Chart(chartCanvas, {
      type: 'line',
      data: {
        datasets: [
          {label: 'loss', yAxisID: 'loss', data: [], borderColor: '#c62828',
           backgroundColor: '#c62828', borderWidth: 1.5, pointRadius: 0},
          {label: 'tokens/s', yAxisID: 'throughput', data: [], borderColor: '#1f5fbf',
           backgroundColor: '#1f5fbf', borderWidth: 1, pointRadius: 0},
          // Evaluations are sparse (train.eval_interval): drawn as points on the loss axis.
          {label: 'validation loss', yAxisID: 'loss', data: [], borderColor: '#2e7d32',
           backgroundColor: '#2e7d32', borderWidth: 1.5, pointRadius: 3},
        ],
      },
      options: {
        animation: false,
        parsing: false,
        normalized: true,
        responsive: true,
        maintainAspectRatio: false,
        interaction: {mode: 'nearest', axis: 'x', intersect: false},
        scales: {
          x: {type: 'linear', title: {display: true, text: 'step'}},
          loss: axis('loss', 'left'),
          throughput: Object.assign(axis('tokens/s', 'right'), {grid: {drawOnChartArea: false}}),
        },
        plugins: {decimation: {enabled: true, algorithm: 'lttb', samples: 1000}},
      },
    });
  }

  async function getJson(url) {
    const response = await fetch(url, {cache: 'no-store'});
    if (!response.ok) throw new Error(url + ': HTTP ' + response.status);
    return response.json();
  }

  function cell(row, text, className) {
    const td = document.createElement('td');
    td.textContent = text;
    if (className) td.className = className;
    row.appendChild(td);
    return td;
  }

  function fixed(value, digits) {
    return value === null || value === undefined ? '-' : value.toFixed(digits);
  }

  function thousands(value) {
    return value === null || value === undefined ? '-' : Math.round(value).toLocaleString('en-US');
  }

  function duration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
    return Math.floor(s / 86400) + 'd' + String(Math.floor(s % 86400 / 3600)).padStart(2, '0') + 'h';
  }

  function bytes(n) {
    if (!n) return '-';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      ++i;
    }
    return n.toFixed(i === 0 ? 0 : 1) + ' ' + units[i];
  }

  function selectedJobId() {
    return decodeURIComponent(window.location.hash.replace(/^#/, ''));
  }

  // The job to chart: the one in the URL if it exists, else the newest active one, else
  // the newest one.
  function chooseJob(jobs) {
    const wanted = selectedJobId();
    const named = jobs.find((job) => job.job_id === wanted);
    if (named) return named;
    const newestFirst = jobs.slice().sort((a, b) => b.submitted_unix_ms - a.submitted_unix_ms);
    return newestFirst.find((job) => ACTIVE_STATES.includes(job.state)) || newestFirst[0] || null;
  }

  function renderJobs(jobs, charted) {
    const body = document.querySelector('#jobs tbody');
    const rows = [];
    const now = Date.now();
    for (const job of jobs.slice().reverse()) {
      const row = document.createElement('tr');
      row.dataset.job = job.job_id;
      row.dataset.state = job.state;
      if (charted && job.job_id === charted.job_id) row.className = 'selected';
      row.addEventListener('click', () => {
        window.location.hash = encodeURIComponent(job.job_id);
      });
      cell(row, job.job_id);
      cell(row, job.name);
      cell(row, job.state, 'state-' + job.state);
      const progress = cell(row, '');
      const bar = document.createElement('progress');
      bar.max = Math.max(1, job.steps);
      bar.value = Math.min(job.step, job.steps);
      progress.appendChild(bar);
      const percent = job.steps > 0 ? Math.floor(100 * job.step / job.steps) : 0;
      progress.appendChild(document.createTextNode(' ' + job.step + '/' + job.steps + ' (' + percent + '%)'));
      cell(row, fixed(job.loss, 4), 'num');
      cell(row, thousands(job.tokens_per_second), 'num');
      cell(row, job.mfu === null ? '-' : (100 * job.mfu).toFixed(1) + '%', 'num');
      cell(row, job.parallel.tensor + '\u00d7' + job.parallel.pipeline + '\u00d7' + job.parallel.data);
      cell(row, String(job.generation), 'num');
      cell(row, String(job.restarts), 'num');
      const ended = ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(job.state);
      cell(row, duration((ended ? job.updated_unix_ms : now) - job.submitted_unix_ms));
      cell(row, job.message, 'message');
      rows.push(row);
    }
    body.replaceChildren(...rows);
    document.getElementById('jobs-empty').hidden = jobs.length > 0;
  }

  function renderWorkers(doc) {
    const body = document.querySelector('#workers tbody');
    const rows = [];
    for (const worker of doc.workers) {
      const row = document.createElement('tr');
      row.dataset.worker = worker.worker_id;
      row.dataset.alive = String(worker.alive);
      cell(row, worker.worker_id);
      cell(row, worker.host);
      const device = worker.device_kind === 'CUDA' ?
          worker.device_count + ' \u00d7 ' + worker.device_name : worker.device_name || worker.device_kind;
      cell(row, device);
      cell(row, bytes(worker.memory_bytes), 'num');
      cell(row, worker.alive ? 'alive' : 'dead', worker.alive ? 'health-alive' : 'health-dead');
      cell(row, worker.state, 'activity-' + worker.state);
      cell(row, worker.job_id || '-');
      cell(row, (worker.last_seen_ms_ago / 1000).toFixed(1) + ' s ago', 'num');
      rows.push(row);
    }
    body.replaceChildren(...rows);
    document.getElementById('workers-empty').hidden = doc.workers.length > 0;
    return doc.workers.filter((w) => w.alive).length + ' of ' + doc.workers.length + ' workers alive';
  }

  function resetChart(job) {
    plotted.jobId = job ? job.job_id : null;
    plotted.generation = job ? job.generation : null;
    plotted.lastStep = 0;
    if (chart) {
      for (const dataset of chart.data.datasets) dataset.data = [];
      for (const id of ['evals', 'samples']) {
        document.getElementById(id).hidden = true;
        document.getElementById(id).querySelector('tbody').textContent = '';
      }
      chart.update('none');
    }
    chartTitle.textContent = job ? '(' + job.job_id + ', ' + job.name + ')' : '';
    chartCanvas.dataset.job = plotted.jobId || '';
    chartCanvas.dataset.points = '0';
    chartCanvas.dataset.validationPoints = '0';
    chartCanvas.dataset.lastStep = '0';
  }

  // The charted job's newest train.eval_tasks results, one row per task.
  function showEvals(stepNumber, evals) {
    const table = document.getElementById('evals');
    const body = table.querySelector('tbody');
    body.textContent = '';
    for (const result of evals) {
      const row = body.insertRow();
      row.dataset.task = result.task;
      const main = result.task === 'perplexity' ?
        'perplexity ' + fixed(result.perplexity, 2) :
        'accuracy ' + fixed(result.accuracy, 3) +
          (result.task === 'choice' ? ', norm ' + fixed(result.accuracy_norm, 3) : '');
      cell(row, String(stepNumber), 'num');
      cell(row, result.task);
      cell(row, result.data.split('/').pop());
      cell(row, main, 'num');
    }
    table.hidden = evals.length === 0;
  }

  // The charted job's newest train.generate texts, one row per prompt.
  function showSamples(stepNumber, generations) {
    const table = document.getElementById('samples');
    const body = table.querySelector('tbody');
    body.textContent = '';
    for (const sample of generations) {
      const row = body.insertRow();
      cell(row, String(stepNumber), 'num');
      cell(row, sample.prompt);
      cell(row, sample.text, 'sample');
      cell(row, fixed(sample.tokens_per_second, 1), 'num');
    }
    table.hidden = generations.length === 0;
  }

  // Appends the steps of `job` after the last plotted one.
  async function updateChart(job) {
    if (!job || job.job_id !== plotted.jobId || job.generation !== plotted.generation) resetChart(job);
    if (!job) {
      if (chart) setChartMessage('No job to chart yet.');
      return;
    }
    if (!chart) return;
    setChartMessage(job.step === 0 ? 'Waiting for the first step of ' + job.job_id + '.' : '');
    if (job.step <= plotted.lastStep) return;
    const [loss, throughput, validation] = chart.data.datasets;
    for (let more = true; more;) {
      const url = '/api/jobs/' + encodeURIComponent(job.job_id) + '/steps?after=' + plotted.lastStep +
                  '&limit=' + STEPS_PER_REQUEST;
      const doc = await getJson(url);
      // The user may have picked another job meanwhile.
      if (plotted.jobId !== job.job_id) return;
      for (const step of doc.steps) {
        if (step.loss !== null) loss.data.push({x: step.step, y: step.loss});
        if (step.tokens_per_second !== null) throughput.data.push({x: step.step, y: step.tokens_per_second});
        if (typeof step.validation_loss === 'number') validation.data.push({x: step.step, y: step.validation_loss});
        if (Array.isArray(step.evals) && step.evals.length > 0) showEvals(step.step, step.evals);
        // BERT's validation: its two heads' accuracies, in the same table.
        if (typeof step.validation_mlm_accuracy === 'number') {
          showEvals(step.step, [
            {task: 'masked_lm', data: 'validation', accuracy: step.validation_mlm_accuracy},
            {task: 'sentence_order', data: 'validation', accuracy: step.validation_sop_accuracy},
          ]);
        }
        // BERT's multiple-choice head (RACE fine-tuning): the share of questions right.
        if (typeof step.validation_choice_accuracy === 'number') {
          showEvals(step.step, [
            {task: 'multiple_choice', data: 'validation', accuracy: step.validation_choice_accuracy},
          ]);
        }
        if (Array.isArray(step.generations) && step.generations.length > 0) {
          showSamples(step.step, step.generations);
        }
        plotted.lastStep = step.step;
      }
      more = doc.more && doc.steps.length > 0;
    }
    for (const dataset of [loss, throughput, validation]) {
      if (dataset.data.length > MAX_POINTS) dataset.data.splice(0, dataset.data.length - MAX_POINTS);
    }
    chart.update('none');
    chartCanvas.dataset.points = String(loss.data.length);
    chartCanvas.dataset.validationPoints = String(validation.data.length);
    chartCanvas.dataset.lastStep = String(plotted.lastStep);
  }

  // The charted job's ranks (/api/jobs/JOB/ranks): every rank of its newest generation
  // that has reported, slowest last step first, with its coordinates. Prometheus keeps
  // per-rank series for the 16 slowest only; this table has them all.
  async function updateRanks(job) {
    const table = document.getElementById('ranks');
    const body = table.querySelector('tbody');
    const doc = job ? await getJson('/api/jobs/' + encodeURIComponent(job.job_id) + '/ranks') :
                      {ranks: []};
    const ranks = doc.ranks.slice().sort((a, b) =>
        b.last_step_seconds - a.last_step_seconds || a.rank - b.rank);
    body.textContent = '';
    for (const rank of ranks) {
      const row = body.insertRow();
      row.dataset.rank = String(rank.rank);
      cell(row, String(rank.rank), 'num');
      cell(row, String(rank.tp_rank), 'num');
      cell(row, String(rank.pp_stage), 'num');
      cell(row, String(rank.dp_rank), 'num');
      cell(row, String(rank.step), 'num');
      cell(row, fixed(rank.last_step_seconds, 3), 'num');
      cell(row, fixed(rank.pipeline_bubble, 3), 'num');
      cell(row, rank.activation_memory_peak_bytes === null ? '-' :
                    thousands(rank.activation_memory_peak_bytes / 1048576) + ' MiB', 'num');
    }
    table.dataset.ranks = String(ranks.length);
    table.hidden = ranks.length === 0;
  }

  // Every job, page after page (/api/jobs pages like the ListJobs RPC): the table and the
  // summary count them all. The largest page keeps the number of requests small.
  async function getAllJobs() {
    const jobs = [];
    let token = '';
    do {
      const doc = await getJson('/api/jobs?page_size=1000' +
                                (token ? '&page_token=' + encodeURIComponent(token) : ''));
      jobs.push(...doc.jobs);
      token = doc.next_page_token;
    } while (token);
    return {jobs: jobs};
  }

  let timer = null;
  let polling = false;

  function schedulePoll(delayMs) {
    window.clearTimeout(timer);
    timer = window.setTimeout(poll, delayMs);
  }

  async function poll() {
    if (polling) return;
    polling = true;
    try {
      const [jobsDoc, workersDoc] = await Promise.all([getAllJobs(), getJson('/api/workers')]);
      const jobs = jobsDoc.jobs;
      const charted = chooseJob(jobs);
      renderJobs(jobs, charted);
      const workers = renderWorkers(workersDoc);
      const active = jobs.filter((job) => ACTIVE_STATES.includes(job.state)).length;
      document.getElementById('summary').textContent =
          jobs.length + (jobs.length === 1 ? ' job, ' : ' jobs, ') + active + ' active; ' + workers;
      await updateChart(charted);
      await updateRanks(charted);
      document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
      errorBanner.hidden = true;
      document.body.dataset.loaded = 'true';
    } catch (error) {
      errorBanner.textContent = 'Cannot reach the coordinator: ' + error.message + ' (retrying)';
      errorBanner.hidden = false;
    } finally {
      polling = false;
      schedulePoll(POLL_MS);
    }
  }

  chart = createChart();
  window.addEventListener('hashchange', () => {
    resetChart(null);
    schedulePoll(0);
  });
  poll();
})();
