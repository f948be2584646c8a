//! `snowmint token`: bearer tokens for the tenants' policy. `new NAME` makes a token from the
//! system's random source and prints it (on the first line, once: it is kept nowhere) and its
//! line for the token file; `hash NAME` reads a token on standard input (a token made
//! elsewhere, or one to rotate in) and prints its line. The file holds lines, never tokens.

use std::io::Read as _;

use clap::{Args, Subcommand};
use snowmint::tenant::token;

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a token named NAME: prints the token, then its line for the token file.
    New {
        /// The token's name, as the policy's tenants list it.
        name: String,
    },
    /// Read a token on standard input: prints its line for the token file, named NAME.
    Hash {
        /// The token's name, as the policy's tenants list it.
        name: String,
    },
}

pub fn run(args: &TokenArgs) -> Result<(), String> {
    match &args.command {
        TokenCommand::New { name } => {
            token::check_name(name)?;
            let made = token::new_token();
            println!("{made}");
            println!("{}", token::line(name, &made));
        }
        TokenCommand::Hash { name } => {
            token::check_name(name)?;
            let mut input = String::new();
            std::io::stdin()
                .take(64 * 1024)
                .read_to_string(&mut input)
                .map_err(|e| format!("cannot read the token: {e}"))?;
            let presented = input.trim();
            if presented.is_empty() || presented.contains(char::is_whitespace) {
                return Err("give one token on standard input, alone on its line".into());
            }
            println!("{}", token::line(name, presented));
        }
    }
    Ok(())
}
