// The page's own script, inlined by tools/render_page.py (no other script of the page
// is its own; outputs such as the attention view bring theirs).
// 1. A link to a folded deep dive, or to anything inside one, opens it first: a click
//    on such a link, a change of the address's #fragment, and the fragment the page
//    is opened with.
// 2. The contents: the fold of the part being read opens (on a wide screen, where the
//    contents stay beside the text) and its link is marked; a fold the reader opened
//    or closed stays as the reader left it.
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
