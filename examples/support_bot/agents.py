"""The support bot's agents: a front desk that hands product questions to the help center."""

from durable_swarm import Agent
from support_bot.help_center import HelpCenter

help_center = HelpCenter.load()


def query_docs(query):
    """Search the help center's articles for the user's question."""
    print(f"Searching the help center for: {query}")
    results = help_center.search(query)
    if not results:
        print("No results")
        return "No results found."
    title, body, url = results[0]
    print(f"Most relevant article: {title}")
    return f"Title: {title}\nContent: {body}\nURL: {url}"


def send_email(email_address, message):
    """Send an email to the user."""
    return f"Email sent to: {email_address} with message: {message}"


def submit_ticket(description):
    """Submit a support ticket for the user."""
    return f"Ticket created for {description}"


def transfer_to_help_center():
    """Transfer the user to the help center agent."""
    return help_center_agent


user_interface_agent = Agent(
    name="User Interface Agent",
    instructions=(
        "You are the front desk: you talk with the user. Answer greetings and general questions "
        "yourself, and transfer questions about the products, the account or billing to the help "
        "center."
    ),
    functions=[transfer_to_help_center],
)

help_center_agent = Agent(
    name="Help Center Agent",
    instructions=(
        "You answer questions about the products (API keys, rate limits, billing, images, "
        "speech, fine-tuning, accounts) from the help center's articles: search them with "
        "query_docs and answer from what you find. Submit a ticket if the articles do not "
        "help, and email the user when they ask."
    ),
    functions=[query_docs, submit_ticket, send_email],
)
