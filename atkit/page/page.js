// The page's own script, inlined by tools/render_page.py (no other script of the page
// is its own; outputs such as the attention view bring theirs).
// 1. A link to a folded deep dive, or to anything inside one, opens it first: a click
//    on such a link, a change of the address's #fragment, and the fragment the page
//    is opened with.
// 2. The contents: the fold of the part being read opens (on a wide screen, where the
//    contents stay beside the text) and its link is marked; a fold the reader opened
//    or closed stays as the reader left it. Below the sidebar's width, a button at the
//    bottom of the screen opens the contents over the text (a link or Escape closes).
// 3. For the reader (the second function): light or dark (the system's, or the
//    reader's choice, kept in localStorage), a copy button on each code cell, display
//    formulas fitted to a narrow column, deep dives opened for printing.
(function () {
  "use strict";

  // ------------------------------------------------------------ deep dives
  function openTo(id) {
    const target = id && document.getElementById(id);
    if (!target) return null;
    let opened = false;
    for (let d = target.closest("details"); d; d = d.parentElement.closest("details")) {
      if (d.closest("nav.toc")) break;
      if (!d.open) {
        d.open = true;
        opened = true;
      }
    }
    return opened ? target : null;
  }
  function idOf(hash) {
    try {
      return decodeURIComponent(hash.slice(1));
    } catch (err) {
      return hash.slice(1);
    }
  }
  // A click opens the fold before the browser follows the link (and scrolls).
  document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest('a[href^="#"]');
    if (a) openTo(idOf(a.getAttribute("href")));
  });
  function followHash() {
    const target = location.hash && openTo(idOf(location.hash));
    if (target) target.scrollIntoView();
  }
  window.addEventListener("hashchange", followHash);
  followHash();

  // ------------------------------------------------------------ contents
  const nav = document.querySelector("nav.toc");
  if (!nav) return;
  const wide = window.matchMedia("(min-width: 1241px)");
  const parts = [...nav.querySelectorAll("li.toc-part")]
    .map((li) => {
      const a = li.querySelector("a");
      const target = a && document.getElementById(idOf(a.hash));
      return { li, target, fold: li.querySelector("details.toc-fold"), auto: false };
    })
    .filter((p) => p.target);
  for (const p of parts) {
    if (!p.fold) continue;
    // A toggle the script did not make is the reader's: leave that fold alone.
    p.fold.addEventListener("toggle", () => {
      if (p.fold.open !== p.expect) p.auto = false;
    });
  }
  function setFold(p, open) {
    p.expect = open;
    p.fold.open = open;
  }
  let current = null;
  function update() {
    const line = window.innerHeight * 0.3;
    let now = null;
    for (const p of parts) {
      if (p.target.getBoundingClientRect().top > line) break;
      now = p;
    }
    if (now === current) return;
    if (current) {
      current.li.classList.remove("toc-current");
      if (current.fold && current.auto) {
        setFold(current, false);
        current.auto = false;
      }
    }
    current = now;
    if (!now) return;
    now.li.classList.add("toc-current");
    if (now.fold && !now.fold.open && wide.matches) {
      setFold(now, true);
      now.auto = true;
    }
  }
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      update();
    });
  }
  window.addEventListener("scroll", schedule, { passive: true });
  window.addEventListener("resize", schedule);
  update();
})();

(function () {
  "use strict";

  // ------------------------------------------------------------ theme
  const root = document.documentElement;
  const systemDark = window.matchMedia("(prefers-color-scheme: dark)");
  const dark = () => root.dataset.theme === "dark" || (!root.dataset.theme && systemDark.matches);
  const header = document.querySelector(".page-header");
  if (header) {
    const theme = document.createElement("button");
    theme.type = "button";
    theme.className = "theme-button";
    const label = () => {
      theme.textContent = dark() ? "Light" : "Dark";
      theme.setAttribute("aria-label", dark() ? "Switch to the light theme" : "Switch to the dark theme");
    };
    theme.addEventListener("click", () => {
      root.dataset.theme = dark() ? "light" : "dark";
      try {
        localStorage.setItem("atpage-theme", root.dataset.theme);
      } catch (err) {
        // no storage (a private window): the choice lasts for this visit
      }
      label();
    });
    systemDark.addEventListener("change", label);
    label();
    header.prepend(theme);
  }

  // ------------------------------------------------------------ copy buttons
  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }
  for (const box of document.querySelectorAll(".input .highlight")) {
    const pre = box.querySelector("pre");
    if (!pre) continue;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "copy-button";
    // The word is drawn by the style sheet (not text of the code's box, which a
    // reader may select and copy by hand).
    const say = (word) => { button.dataset.label = word; };
    say("Copy");
    button.setAttribute("aria-label", "Copy this code");
    button.addEventListener("click", () => {
      copyText(pre.textContent.replace(/\n$/, "")).then(
        () => say("Copied"), () => say("Select and copy"));
      setTimeout(() => say("Copy"), 1600);
    });
    box.appendChild(button);
  }

  // ------------------------------------------------------------ contents button
  const nav = document.querySelector("nav.toc");
  if (nav) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "toc-button";
    button.textContent = "Contents";
    button.setAttribute("aria-controls", nav.id || "contents");
    button.setAttribute("aria-expanded", "false");
    const show = (open) => {
      document.body.classList.toggle("toc-open", open);
      button.setAttribute("aria-expanded", String(open));
      button.textContent = open ? "Close" : "Contents";
      if (open) {
        const list = nav.querySelector(":scope > details");
        if (list) list.open = true;
        const here = nav.querySelector(".toc-current > a") || nav.querySelector("a");
        if (here) here.focus({ preventScroll: false });
      }
    };
    button.addEventListener("click", () => show(!document.body.classList.contains("toc-open")));
    nav.addEventListener("click", (e) => { if (e.target.closest("a")) show(false); });
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && document.body.classList.contains("toc-open")) {
        show(false);
        button.focus();
      }
    });
    document.body.appendChild(button);
  }

  // ------------------------------------------------------------ display formulas
  // A formula wider than its box is scaled down to fit, to 0.62 of its size at least;
  // past that it scrolls, with a visible cue, and takes keyboard focus.
  const MIN_FIT = 0.62;
  function fitFormulas() {
    for (const box of document.querySelectorAll(".katex-display")) {
      if (!box.getClientRects().length) continue; // in a closed deep dive: on open
      box.classList.remove("fitted", "scrolls");
      box.style.removeProperty("--fit");
      const inner = box.querySelector(":scope > .katex");
      if (!inner) continue;
      const width = box.clientWidth, need = inner.scrollWidth;
      if (need <= width + 1) {
        box.removeAttribute("tabindex");
        continue;
      }
      const fit = Math.max(MIN_FIT, Math.floor((width / need) * 100) / 100);
      box.style.setProperty("--fit", String(fit));
      box.classList.add("fitted");
      if (box.scrollWidth > box.clientWidth + 1) {
        box.classList.add("scrolls");
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "group");
        box.setAttribute("aria-label", "formula, scrolls sideways");
      } else {
        box.removeAttribute("tabindex");
      }
    }
  }
  // A printed table (render_page.output_lines: aligned columns) that does not fit its
  // box even at its smallest type keeps its rows as lines and scrolls sideways, with
  // a cue, rather than wrap each row into broken columns; it takes keyboard focus.
  function fitTables() {
    for (const pre of document.querySelectorAll(".output pre.table")) {
      if (!pre.getClientRects().length) continue;
      pre.classList.remove("scrolls");
      const line = parseFloat(getComputedStyle(pre).lineHeight);
      const wraps = [...pre.querySelectorAll(".ln")].some(
        (ln) => ln.getBoundingClientRect().height > 1.5 * line);
      if (wraps) {
        pre.classList.add("scrolls");
        pre.setAttribute("tabindex", "0");
        pre.setAttribute("role", "region");
        const first = (pre.querySelector(".ln") || pre).textContent.trim().slice(0, 50);
        pre.setAttribute("aria-label", `table (scrolls sideways): ${first}`);
      } else {
        for (const a of ["tabindex", "role", "aria-label"]) pre.removeAttribute(a);
      }
    }
  }
  function fitAll() {
    fitFormulas();
    fitTables();
  }
  let fitting = 0;
  const refit = () => {
    cancelAnimationFrame(fitting);
    fitting = requestAnimationFrame(fitAll);
  };
  window.addEventListener("resize", refit);
  document.addEventListener("toggle", refit, true); // a deep dive opened
  if (document.fonts && document.fonts.ready) document.fonts.ready.then(fitAll);
  fitAll();

  // ------------------------------------------------------------ print
  let opened = [];
  window.addEventListener("beforeprint", () => {
    opened = [...document.querySelectorAll("main details:not([open])")];
    for (const d of opened) d.open = true;
    fitAll();
  });
  window.addEventListener("afterprint", () => {
    for (const d of opened) d.open = false;
    opened = [];
  });
})();
