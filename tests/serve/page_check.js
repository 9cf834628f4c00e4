// Drives the server's web page in headless Chromium (playwright-core): search, then similarity.
// Usage: node page_check.js URL [API_KEY]; prints what the page showed as JSON.
const { chromium } = require("playwright-core");

(async () => {
  const [url, key] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
  try {
    const context = await browser.newContext(
      key ? { httpCredentials: { username: "bertkit", password: key } } : {});
    const page = await context.newPage();
    page.setDefaultTimeout(20000);
    await page.goto(url);
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("dimensions"));
    const model = await page.textContent("#model");
    await page.fill("#query", "the cat sat on the mat");
    await page.press("#query", "Enter");
    await page.waitForSelector("#results li.result");
    const results = await page.$$eval("#results li.result", items => items.map(li => ({
      id: li.querySelector(".id").textContent,
      score: Number(li.querySelector(".score").textContent),
      text: li.childNodes[1].textContent })));
    await page.fill("#text-a", "hello world");
    await page.fill("#text-b", "hello world");
    await page.click("#similarity-button");
    await page.waitForFunction(() => document.getElementById("similarity").textContent.includes("cosine"));
    const similarity = await page.textContent("#similarity");
    console.log(JSON.stringify({ model, results, similarity }));
  } finally {
    await browser.close();
  }
})().catch(error => { console.error(String(error && error.stack || error)); process.exit(1); });
