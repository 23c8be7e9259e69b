"""Save a screenshot of the dashboard's default page (headless Chromium via selenium).

    python -m dashboard.screenshot docs/dashboard.png [--query '?gpus=16'] [--tab blocks]
    python -m dashboard.screenshot docs/questions-en-q5.png --query '?view=questions&q=5' \
        --click '#quiz-choice label:nth-of-type(2)' --scroll-to '#tabs'

Serves the app on a free loopback port in a thread, waits until the views have drawn,
and writes a PNG. Needs Debian's chromium and chromium-driver (see FIELD-NOTES.md).
"""

from __future__ import annotations

import argparse
import logging
import threading
import time

from werkzeug.serving import make_server

from dashboard.app import create_app

CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--hide-scrollbars")


def _driver(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in CHROME_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--query", default="")
    ap.add_argument("--tab", default=None, help="tab value to open before the shot")
    ap.add_argument("--upload", default=None, help="a trace file to upload on the measured tab")
    ap.add_argument("--click", action="append", default=[],
                    help="CSS selector of an element to click once the page has drawn (repeatable)")
    ap.add_argument("--scroll-to", default=None, help="CSS selector to scroll to the top of the shot")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=1250)
    a = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, create_app().server, threaded=True)
    port = server.server_port
    threading.Thread(target=server.serve_forever, daemon=True).start()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _driver(a.width, a.height)
    try:
        driver.get(f"http://127.0.0.1:{port}/{a.query}")
        wait = WebDriverWait(driver, 60)
        if a.tab:
            tab = wait.until(EC.element_to_be_clickable(
                (By.XPATH, f"//*[@id='tabs']//*[normalize-space()='{a.tab}']")))
            tab.click()
        if a.upload:
            import os
            driver.find_element(By.CSS_SELECTOR, "#trace-upload input[type=file]").send_keys(
                os.path.abspath(a.upload))
            wait.until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, "#overlay .gtitle"),
                                                        "Model vs measurement"))
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, "#layout-strip .main-svg")))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#timeline .main-svg, #block-map .main-svg, "
                                                               "#compare .main-svg, #schemes .main-svg, #sweep .main-svg, "
                                                               "#memory .main-svg, #merge .main-svg, "
                                                               "#overlay .main-svg, #quiz-choice label"))
        for selector in a.click:
            wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, selector))).click()
            time.sleep(1.0)
        if a.click:
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#quiz-figure .main-svg")
                       or not d.find_elements(By.CSS_SELECTOR, "#quiz-figure"))
        if a.scroll_to:
            driver.execute_script("arguments[0].scrollIntoView(true);",
                                  driver.find_element(By.CSS_SELECTOR, a.scroll_to))
        time.sleep(2.0)   # let Plotly finish its transitions
        driver.save_screenshot(a.out)
        logs = driver.get_log("browser")
        for entry in logs:
            if entry.get("level") == "SEVERE":
                print("browser:", entry.get("message"))
    finally:
        driver.quit()
        server.shutdown()
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
